#include "rsa_shim.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <stdlib.h>
#include <string.h>

struct fr_rsa_key {
    EVP_PKEY *pkey;
};

static fr_rsa_key *wrap_rsa(EVP_PKEY *pkey) {
    if (pkey == NULL) {
        ERR_clear_error();
        return NULL;
    }
    if (EVP_PKEY_get_base_id(pkey) != EVP_PKEY_RSA) {
        EVP_PKEY_free(pkey);
        return NULL;
    }
    fr_rsa_key *key = malloc(sizeof(fr_rsa_key));
    if (key == NULL) {
        EVP_PKEY_free(pkey);
        return NULL;
    }
    key->pkey = pkey;
    return key;
}

fr_rsa_key *fr_rsa_private_key_from_pem(const char *pem, size_t pem_len) {
    BIO *bio = BIO_new_mem_buf(pem, (int)pem_len);
    if (bio == NULL) return NULL;
    /* An empty passphrase callback: an encrypted key fails instead of prompting on a tty. */
    EVP_PKEY *pkey = PEM_read_bio_PrivateKey(bio, NULL, NULL, (void *)"");
    BIO_free(bio);
    return wrap_rsa(pkey);
}

fr_rsa_key *fr_rsa_public_key_from_pem(const char *pem, size_t pem_len) {
    BIO *bio = BIO_new_mem_buf(pem, (int)pem_len);
    if (bio == NULL) return NULL;
    EVP_PKEY *pkey = PEM_read_bio_PUBKEY(bio, NULL, NULL, NULL);
    BIO_free(bio);
    return wrap_rsa(pkey);
}

void fr_rsa_key_free(fr_rsa_key *key) {
    if (key == NULL) return;
    EVP_PKEY_free(key->pkey);
    free(key);
}

int fr_rsa_key_bits(const fr_rsa_key *key) { return EVP_PKEY_get_bits(key->pkey); }

size_t fr_rsa_signature_size(const fr_rsa_key *key) { return (size_t)EVP_PKEY_get_size(key->pkey); }

int fr_rsa_sign_sha256(const fr_rsa_key *key, const uint8_t *data, size_t data_len,
                       uint8_t *signature, size_t *signature_len) {
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (ctx == NULL) return 0;
    int ok = EVP_DigestSignInit(ctx, NULL, EVP_sha256(), NULL, key->pkey) == 1 &&
             EVP_DigestSign(ctx, signature, signature_len, data, data_len) == 1;
    EVP_MD_CTX_free(ctx);
    if (!ok) ERR_clear_error();
    return ok;
}

int fr_rsa_verify_sha256(const fr_rsa_key *key, const uint8_t *data, size_t data_len,
                         const uint8_t *signature, size_t signature_len) {
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (ctx == NULL) return 0;
    int ok = EVP_DigestVerifyInit(ctx, NULL, EVP_sha256(), NULL, key->pkey) == 1 &&
             EVP_DigestVerify(ctx, signature, signature_len, data, data_len) == 1;
    EVP_MD_CTX_free(ctx);
    if (!ok) ERR_clear_error();
    return ok;
}

static char *bio_to_string(BIO *bio, size_t *len) {
    char *data = NULL;
    long n = BIO_get_mem_data(bio, &data);
    char *copy = n > 0 ? malloc((size_t)n + 1) : NULL;
    if (copy != NULL) {
        memcpy(copy, data, (size_t)n);
        copy[n] = 0;
        *len = (size_t)n;
    }
    return copy;
}

char *fr_rsa_generate_pkcs8_pem(int bits, size_t *pem_len) {
    EVP_PKEY *pkey = EVP_RSA_gen((unsigned int)bits);
    if (pkey == NULL) {
        ERR_clear_error();
        return NULL;
    }
    BIO *bio = BIO_new(BIO_s_mem());
    char *pem = NULL;
    if (bio != NULL && PEM_write_bio_PKCS8PrivateKey(bio, pkey, NULL, NULL, 0, NULL, NULL) == 1) {
        pem = bio_to_string(bio, pem_len);
    }
    BIO_free(bio);
    EVP_PKEY_free(pkey);
    return pem;
}

char *fr_rsa_public_pem(const fr_rsa_key *key, size_t *pem_len) {
    BIO *bio = BIO_new(BIO_s_mem());
    char *pem = NULL;
    if (bio != NULL && PEM_write_bio_PUBKEY(bio, key->pkey) == 1) {
        pem = bio_to_string(bio, pem_len);
    }
    BIO_free(bio);
    return pem;
}

void fr_free(void *pointer) { free(pointer); }

#include "throwaway_ca.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdlib.h>
#include <string.h>

static EVP_PKEY *generate_p256(void) {
    return EVP_EC_gen("P-256");
}

static char *bio_to_string(BIO *bio) {
    char *data = NULL;
    long length = BIO_get_mem_data(bio, &data);
    if (length <= 0) return NULL;
    char *copy = malloc((size_t)length + 1);
    if (copy == NULL) return NULL;
    memcpy(copy, data, (size_t)length);
    copy[length] = 0;
    return copy;
}

static char *certificate_pem(X509 *certificate) {
    BIO *bio = BIO_new(BIO_s_mem());
    if (bio == NULL) return NULL;
    char *pem = PEM_write_bio_X509(bio, certificate) == 1 ? bio_to_string(bio) : NULL;
    BIO_free(bio);
    return pem;
}

static char *private_key_pem(EVP_PKEY *key) {
    BIO *bio = BIO_new(BIO_s_mem());
    if (bio == NULL) return NULL;
    char *pem = PEM_write_bio_PrivateKey(bio, key, NULL, NULL, 0, NULL, NULL) == 1 ? bio_to_string(bio) : NULL;
    BIO_free(bio);
    return pem;
}

static int add_extension(X509 *certificate, X509 *issuer, int nid, const char *value) {
    X509V3_CTX context;
    X509V3_set_ctx_nodb(&context);
    X509V3_set_ctx(&context, issuer, certificate, NULL, NULL, 0);
    X509_EXTENSION *extension = X509V3_EXT_conf_nid(NULL, &context, nid, value);
    if (extension == NULL) return 0;
    int added = X509_add_ext(certificate, extension, -1);
    X509_EXTENSION_free(extension);
    return added;
}

/// A certificate for `key` with `common_name`, not yet signed; NULL on failure.
static X509 *new_certificate(EVP_PKEY *key, const char *common_name, int days) {
    X509 *certificate = X509_new();
    if (certificate == NULL) return NULL;
    unsigned char serial[16];
    BIGNUM *serial_number = NULL;
    int ok = X509_set_version(certificate, 2)
        && RAND_bytes(serial, sizeof serial) == 1
        && (serial[0] &= 0x7f, (serial_number = BN_bin2bn(serial, sizeof serial, NULL)) != NULL)
        && BN_to_ASN1_INTEGER(serial_number, X509_get_serialNumber(certificate)) != NULL
        && X509_gmtime_adj(X509_getm_notBefore(certificate), -3600) != NULL
        && X509_gmtime_adj(X509_getm_notAfter(certificate), (long)days * 86400) != NULL
        && X509_set_pubkey(certificate, key)
        && X509_NAME_add_entry_by_txt(X509_get_subject_name(certificate), "CN", MBSTRING_ASC,
                                      (const unsigned char *)common_name, -1, -1, 0);
    BN_free(serial_number);
    if (!ok) {
        X509_free(certificate);
        return NULL;
    }
    return certificate;
}

/// "DNS:a,DNS:b,IP:127.0.0.1" from the names; malloc'ed.
static char *subject_alternative_names(const char *const *dns_names, size_t dns_count,
                                       const char *const *ip_addresses, size_t ip_count) {
    size_t length = 1;
    for (size_t i = 0; i < dns_count; i++) length += strlen(dns_names[i]) + 5;
    for (size_t i = 0; i < ip_count; i++) length += strlen(ip_addresses[i]) + 4;
    char *text = calloc(length, 1);
    if (text == NULL) return NULL;
    for (size_t i = 0; i < dns_count; i++) {
        if (*text) strcat(text, ",");
        strcat(text, "DNS:");
        strcat(text, dns_names[i]);
    }
    for (size_t i = 0; i < ip_count; i++) {
        if (*text) strcat(text, ",");
        strcat(text, "IP:");
        strcat(text, ip_addresses[i]);
    }
    return text;
}

int fr_tls_generate_throwaway(const char *const *dns_names, size_t dns_count,
                              const char *const *ip_addresses, size_t ip_count, int days,
                              char **ca_certificate_pem, char **server_certificate_pem,
                              char **server_key_pem) {
    *ca_certificate_pem = *server_certificate_pem = *server_key_pem = NULL;
    if (dns_count + ip_count == 0) return 0;
    EVP_PKEY *ca_key = generate_p256();
    EVP_PKEY *server_key = generate_p256();
    X509 *ca = ca_key ? new_certificate(ca_key, "fleet-relay throwaway CA", days) : NULL;
    X509 *server = server_key ? new_certificate(server_key, dns_count ? dns_names[0] : ip_addresses[0], days) : NULL;
    char *names = subject_alternative_names(dns_names, dns_count, ip_addresses, ip_count);
    int ok = ca && server && names
        && X509_set_issuer_name(ca, X509_get_subject_name(ca))
        && add_extension(ca, ca, NID_basic_constraints, "critical,CA:TRUE,pathlen:0")
        && add_extension(ca, ca, NID_key_usage, "critical,keyCertSign,cRLSign")
        && add_extension(ca, ca, NID_subject_key_identifier, "hash")
        && X509_sign(ca, ca_key, EVP_sha256()) > 0
        && X509_set_issuer_name(server, X509_get_subject_name(ca))
        && add_extension(server, ca, NID_basic_constraints, "critical,CA:FALSE")
        && add_extension(server, ca, NID_key_usage, "critical,digitalSignature")
        && add_extension(server, ca, NID_ext_key_usage, "serverAuth")
        && add_extension(server, ca, NID_subject_alt_name, names)
        && add_extension(server, ca, NID_authority_key_identifier, "keyid:always")
        && X509_sign(server, ca_key, EVP_sha256()) > 0;
    if (ok) {
        *ca_certificate_pem = certificate_pem(ca);
        *server_certificate_pem = certificate_pem(server);
        *server_key_pem = private_key_pem(server_key);
        ok = *ca_certificate_pem && *server_certificate_pem && *server_key_pem;
    }
    if (!ok) {
        free(*ca_certificate_pem);
        free(*server_certificate_pem);
        free(*server_key_pem);
        *ca_certificate_pem = *server_certificate_pem = *server_key_pem = NULL;
        ERR_clear_error();
    }
    free(names);
    X509_free(ca);
    X509_free(server);
    EVP_PKEY_free(ca_key);
    EVP_PKEY_free(server_key);
    return ok;
}

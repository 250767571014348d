#ifndef FLEET_RELAY_RSA_SHIM_H
#define FLEET_RELAY_RSA_SHIM_H

#include <stddef.h>
#include <stdint.h>

/// An RSA key held by the system's libcrypto. Opaque to Swift; shareable across
/// threads for signing and verifying (libcrypto treats it as read-only).
typedef struct fr_rsa_key fr_rsa_key;

/// Parses a PEM private key (PKCS#8 or PKCS#1). Returns NULL when it is not a
/// parsable RSA private key; never logs or keeps the PEM text.
fr_rsa_key *fr_rsa_private_key_from_pem(const char *pem, size_t pem_len);

/// Parses a PEM public key (SubjectPublicKeyInfo). Returns NULL on failure.
fr_rsa_key *fr_rsa_public_key_from_pem(const char *pem, size_t pem_len);

void fr_rsa_key_free(fr_rsa_key *key);

/// Modulus size in bits.
int fr_rsa_key_bits(const fr_rsa_key *key);

/// Maximum signature length in bytes for this key.
size_t fr_rsa_signature_size(const fr_rsa_key *key);

/// RSASSA-PKCS1-v1_5 with SHA-256 (JWT "RS256"). Returns 1 on success and sets
/// *signature_len; 0 on failure.
int fr_rsa_sign_sha256(const fr_rsa_key *key, const uint8_t *data, size_t data_len,
                       uint8_t *signature, size_t *signature_len);

/// Returns 1 when the signature is valid, 0 otherwise.
int fr_rsa_verify_sha256(const fr_rsa_key *key, const uint8_t *data, size_t data_len,
                         const uint8_t *signature, size_t signature_len);

/// Generates a fresh key and writes it as a PKCS#8 PEM into a malloc'ed buffer
/// the caller frees with fr_free. Returns NULL on failure.
char *fr_rsa_generate_pkcs8_pem(int bits, size_t *pem_len);

/// Writes the key's public half as a SubjectPublicKeyInfo PEM (malloc'ed).
char *fr_rsa_public_pem(const fr_rsa_key *key, size_t *pem_len);

void fr_free(void *pointer);

#endif

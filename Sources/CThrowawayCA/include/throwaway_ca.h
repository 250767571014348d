#ifndef FLEET_RELAY_THROWAWAY_CA_H
#define FLEET_RELAY_THROWAWAY_CA_H

#include <stddef.h>

/// Generates a throwaway certificate authority and a server certificate it signed
/// (ECDSA P-256, SHA-256, valid from one hour ago for `days`), for HTTPS in tests and
/// demos. The server certificate names each of `dns_names` and `ip_addresses`
/// (IPv4 or IPv6 text) as subject alternative names. On success returns 1 and sets
/// three malloc'ed PEM strings the caller frees with fr_free: the CA certificate,
/// the server certificate and the server's PKCS#8 private key. The CA's key is
/// discarded, so nothing else can ever be signed by it.
int fr_tls_generate_throwaway(const char *const *dns_names, size_t dns_count,
                              const char *const *ip_addresses, size_t ip_count, int days,
                              char **ca_certificate_pem, char **server_certificate_pem,
                              char **server_key_pem);

#endif

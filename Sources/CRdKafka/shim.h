#include <librdkafka/rdkafka.h>

#if defined(__linux__)
#include <pthread.h>
// glibc declares it only under _GNU_SOURCE; the poll threads name themselves with it.
int pthread_setname_np(pthread_t thread, const char *name);
#endif

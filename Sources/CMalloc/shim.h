// glibc's allocator tuning (mallopt), for the relay's arena limit.
#if defined(__linux__)
#include <malloc.h>
#endif

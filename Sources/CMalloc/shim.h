// glibc's allocator tuning (mallopt): the relay fixes the mmap threshold.
#if defined(__linux__)
#include <malloc.h>
#endif

#if os(Linux)
import CMalloc
#endif

/// glibc's allocator serves an allocation of 128 KiB or more with its own mapping, returned to
/// the system when freed, but raises that threshold to the size of each such block freed (up to
/// 32 MiB). A cold start grows the relay's lane and token tables through blocks of several
/// megabytes, so afterwards every buffer below them came from the allocator's arenas, which keep
/// what is freed: at 100,000 vehicles 181 MB resident after a cold start, 163 MB with the
/// threshold fixed, at the same CPU per request. Blocks that large are rare on the request path.
///
/// Limiting the arenas (`MALLOC_ARENA_MAX=2`) saves another 40 MB there but costs about 5 % more
/// CPU per request on two cores: the operator's choice, documented in the README.
package enum MallocTuning {
    package static let mmapThreshold: Int32 = 256 * 1024

    /// Fixes the threshold unless the operator chose with `MALLOC_MMAP_THRESHOLD_`, which glibc reads itself.
    package static func apply(environment: [String: String]) {
        #if os(Linux)
        guard environment["MALLOC_MMAP_THRESHOLD_"] == nil else { return }
        _ = mallopt(M_MMAP_THRESHOLD, mmapThreshold)
        #endif
    }

    /// After a burst (a cold start, a backlog) the arenas hold what its records and requests
    /// took, freed between the tokens that stay; `malloc_trim` returns those free pages in
    /// every arena to the system: at 100,000 vehicles 123 MB resident after a cold start
    /// instead of 158–163 MB, for 4–11 ms once per burst.
    @Sendable package static func releaseFreedMemory() {
        #if os(Linux)
        _ = malloc_trim(0)
        #endif
    }
}

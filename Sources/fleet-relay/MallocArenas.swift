#if os(Linux)
import CMalloc
#endif

/// glibc's allocator gives each thread that allocates concurrently an arena of its own, up to
/// eight per core, and each arena keeps the memory freed into it. The relay allocates from
/// NIO's event loops, the concurrency pool and librdkafka's threads, so a burst (a cold start
/// mints and sends for every vehicle at once) left tens of megabytes free but held in arenas
/// that the next allocations never reuse: at 100,000 vehicles 230 MB resident after a cold start
/// with the default, 187 MB with two arenas, at the same CPU per request.
enum MallocArenas {
    static let limit: Int32 = 2

    /// Limits the arenas unless the operator chose with `MALLOC_ARENA_MAX`, which glibc reads itself.
    static func limit(environment: [String: String]) {
        #if os(Linux)
        guard environment["MALLOC_ARENA_MAX"] == nil else { return }
        _ = mallopt(M_ARENA_MAX, limit)
        #endif
    }
}

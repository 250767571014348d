#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Wall-clock time since the epoch, as tokens and event timestamps count it.
public enum WallClock {
    public static func nowMilliseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
    }

    /// The same within a few milliseconds (the kernel's last tick), for a check per record:
    /// it is read from memory, several times cheaper than `nowMilliseconds`.
    public static func coarseNowMilliseconds() -> Int64 {
        #if os(Linux)
        var now = timespec()
        clock_gettime(CLOCK_REALTIME_COARSE, &now)
        return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
        #else
        return nowMilliseconds()
        #endif
    }
}

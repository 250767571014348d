import FleetAuth
import FleetEngine

/// A `--from`/`--to` value: an RFC 3339 timestamp or a time relative to now (`-2h`, `-90m`, `-30s`, `-1d`).
public enum ReplayTime {
    public struct ParseError: Error, CustomStringConvertible {
        public let text: String
        public var description: String {
            "'\(text)' is neither an RFC 3339 time (2026-11-22T21:00:00Z) nor a relative one (-2h, -90m, -30s, -1d)"
        }
    }

    /// Milliseconds since the epoch.
    public static func parse(_ text: String, nowMilliseconds: Int64 = WallClock.nowMilliseconds()) throws -> Int64 {
        if let absolute = RFC3339.parseMilliseconds(text) { return absolute }
        guard text.hasPrefix("-"), let unit = text.last, let amount = Int64(text.dropFirst().dropLast()), amount >= 0 else {
            throw ParseError(text: text)
        }
        let unitMilliseconds: Int64
        switch unit {
        case "s": unitMilliseconds = 1000
        case "m": unitMilliseconds = 60_000
        case "h": unitMilliseconds = 3_600_000
        case "d": unitMilliseconds = 86_400_000
        default: throw ParseError(text: text)
        }
        return nowMilliseconds - amount * unitMilliseconds
    }
}

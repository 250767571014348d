/// Delays in whole milliseconds, counted per millisecond up to a minute (beyond
/// that, in the last bucket) so percentiles are exact at benchmark resolution.
struct LatencyHistogram: Sendable {
    private static let limit = 60_000
    private var counts = [Int](repeating: 0, count: LatencyHistogram.limit + 1)
    private(set) var count = 0
    private(set) var maximum: Int64 = 0

    mutating func record(milliseconds: Int64) {
        let clamped = Int(max(0, min(milliseconds, Int64(Self.limit))))
        counts[clamped] += 1
        count += 1
        maximum = max(maximum, milliseconds)
    }

    /// The smallest delay at or below which `fraction` of the samples fall.
    func percentile(_ fraction: Double) -> Int64 {
        guard count > 0 else { return 0 }
        let rank = Int((Double(count) * fraction).rounded(.up))
        var seen = 0
        for (milliseconds, bucket) in counts.enumerated() {
            seen += bucket
            if seen >= rank { return Int64(milliseconds) }
        }
        return maximum
    }
}

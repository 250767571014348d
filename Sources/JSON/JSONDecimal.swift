/// Writes a double the way `description` does, without its general search for the shortest
/// digits, when the value is a plain decimal of at most nine fraction digits between 10^-4 and
/// 10^6: coordinates, speeds and accuracies as devices report them. A drained request carries
/// up to a hundred locations of five such numbers each, and `description` took half of the
/// time spent writing their bodies.
///
/// Why the text is `description`'s: let `k` be the value times 10^9, rounded. When `k / 10^9`
/// (an exact integer below 2^53 divided by an exact power of ten: a correctly rounded
/// quotient) gives the value back, the decimal `k · 10^-9` reads back as the value, so the
/// shortest round-trip form has at most nine fraction digits too. That form, padded to nine
/// digits, is an integer within 0.25 of the value times 10^9 (the product's rounding errors
/// are below that for `k` under 10^15), so it is `k`; its trailing zeros dropped, it is the
/// text written here. In this range `description` writes no exponent.
public enum JSONDecimal {
    /// The longest text `write` produces: a sign, six integer digits, a point, nine fraction digits.
    public static let longestText = 17

    private static let scale = 1e9
    private static let fractionDigits = 9

    /// Writes `value` into `output` (at least `longestText` bytes) and returns the bytes
    /// written; nil, with nothing written, when the value is whole, outside 10^-4 ..< 10^6, not
    /// finite, or needs more than nine fraction digits.
    public static func write(_ value: Double, into output: UnsafeMutableBufferPointer<UInt8>) -> Int? {
        let magnitude = value.magnitude
        guard magnitude >= 1e-4, magnitude < 1e6 else { return nil }
        // Rounded half up by adding a half and truncating, as `rounded()` would (without libm's
        // `round`): the product lies in [10^5, 10^15), where its unit in the last place divides
        // a half, so the sum is exact, or lands on the power of two `rounded()` gives too.
        let units = UInt64(magnitude * scale + 0.5)
        guard Double(units) / scale == magnitude else { return nil }
        let whole = units / 1_000_000_000
        var fraction = units % 1_000_000_000
        guard fraction != 0 else { return nil }
        var fractionCount = fractionDigits
        while fraction % 10 == 0 {
            fraction /= 10
            fractionCount -= 1
        }
        precondition(output.count >= longestText, "JSONDecimal.write needs \(longestText) bytes")
        var written = 0
        if value < 0 {
            output[0] = UInt8(ascii: "-")
            written = 1
        }
        written += writeDigits(of: whole, count: digitCount(whole), into: output, at: written)
        output[written] = UInt8(ascii: ".")
        written += 1
        written += writeDigits(of: fraction, count: fractionCount, into: output, at: written)
        return written
    }

    private static func digitCount(_ value: UInt64) -> Int {
        var count = 1
        var rest = value
        while rest >= 10 {
            count += 1
            rest /= 10
        }
        return count
    }

    /// `value`'s last `count` decimal digits, leading zeros included.
    private static func writeDigits(of value: UInt64, count: Int, into output: UnsafeMutableBufferPointer<UInt8>,
                                    at start: Int) -> Int {
        var rest = value
        for position in stride(from: start + count - 1, through: start, by: -1) {
            output[position] = UInt8(ascii: "0") + UInt8(rest % 10)
            rest /= 10
        }
        return count
    }
}

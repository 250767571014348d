import JSON
import Testing

@Suite struct JSONDecimalTests {
    /// What `JSONDecimal.write` wrote, or nil.
    static func written(_ value: Double) -> String? {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: JSONDecimal.longestText) { output in
            JSONDecimal.write(value, into: output).map { String(decoding: output[..<$0], as: UTF8.self) }
        }
    }

    /// A decimal as a device sends it: up to six integer digits, `fractionDigits` fraction digits.
    static func decimalText(fractionDigits: Int, using generator: inout some RandomNumberGenerator) -> String {
        var text = Bool.random(using: &generator) ? "-" : ""
        text += String(Int.random(in: 0...999_999, using: &generator))
        text += "."
        for _ in 0..<fractionDigits { text += String(Int.random(in: 0...9, using: &generator)) }
        return text
    }

    /// Every decimal of up to nine fraction digits in range takes the short path, and what it
    /// writes is `description`'s text, digit for digit.
    @Test func devicesDecimalsAreWrittenAsDescriptionWritesThem() {
        var generator = SystemRandomNumberGenerator()
        var texts = ["37.7749295", "-122.4194155", "0.1", "0.3", "0.0001", "-0.0001", "0.00012", "999999.999999999",
                     "0.000100001", "1.5", "45.000000001", "180.25", "123456.7"]
        for _ in 0..<50_000 {
            texts.append(Self.decimalText(fractionDigits: Int.random(in: 1...9, using: &generator), using: &generator))
        }
        for text in texts {
            let value = Double(text)!
            guard value != value.rounded(), value.magnitude >= 1e-4 else { continue }
            guard let written = Self.written(value) else {
                Issue.record("\(text) (\(value)) did not take the short path")
                return
            }
            guard written == value.description else {
                Issue.record("\(text): wrote \(written), description writes \(value.description)")
                return
            }
        }
    }

    /// Any other double is left to `description` or written as it would write it.
    @Test func otherDoublesAreLeftToDescriptionOrWrittenTheSame() {
        var generator = SystemRandomNumberGenerator()
        var values: [Double] = [0, -0.0, 1, 37, 0.1 + 0.2, 1e-5, 5e-5, 0.00009999, 1e6, 1e6 + 0.5, -1e6 - 0.25,
                                .pi, .ulpOfOne, .greatestFiniteMagnitude, .leastNonzeroMagnitude, .infinity, .nan,
                                0.0001.nextDown, 0.0001.nextUp, 1e6.nextDown, 37.7749295.nextUp]
        for _ in 0..<50_000 {
            values.append(Double.random(in: -1e6...1e6, using: &generator))
            values.append(Double(Self.decimalText(fractionDigits: Int.random(in: 10...17, using: &generator), using: &generator))!)
            values.append(Double(bitPattern: UInt64.random(in: 0...UInt64.max, using: &generator)))
        }
        for value in values {
            guard let written = Self.written(value) else { continue }
            guard written == value.description else {
                Issue.record("\(value.bitPattern): wrote \(written), description writes \(value.description)")
                return
            }
        }
        #expect(Self.written(0.1 + 0.2) == nil)
        #expect(Self.written(1e-5) == nil)
        #expect(Self.written(37) == nil)
        #expect(Self.written(1e6 + 0.5) == nil)
    }
}

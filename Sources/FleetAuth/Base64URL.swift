/// Base64url without padding (RFC 7515 §2), as JWTs use it. Works on bytes
/// directly: every request's token passes through here.
public enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
    private static let values: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (index, character) in alphabet.enumerated() { table[Int(character)] = UInt8(index) }
        return table
    }()

    public static func encode(_ bytes: some Sequence<UInt8>) -> String {
        let input = Array(bytes)
        return String(unsafeUninitializedCapacity: encodedCount(input.count)) { encode(input[...], into: $0) }
    }

    public static func encode(_ string: String) -> String { encode(Array(string.utf8)) }

    /// Characters that `count` bytes take, without padding.
    public static func encodedCount(_ count: Int) -> Int { (count * 4 + 2) / 3 }

    /// Writes `bytes` encoded at the start of `output` (at least `encodedCount` long); returns
    /// how many characters it wrote.
    public static func encode(_ bytes: ArraySlice<UInt8>, into output: UnsafeMutableBufferPointer<UInt8>) -> Int {
        bytes.withUnsafeBufferPointer { encode($0, into: output) }
    }

    public static func encode(_ input: UnsafeBufferPointer<UInt8>, into output: UnsafeMutableBufferPointer<UInt8>) -> Int {
        alphabet.withUnsafeBufferPointer { alphabet in
            func character(_ group: UInt32, _ shift: UInt32) -> UInt8 { alphabet[Int(group >> shift & 0x3F)] }
            var (index, written) = (0, 0)
            while index + 3 <= input.count {
                let group = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8 | UInt32(input[index + 2])
                output[written] = character(group, 18)
                output[written + 1] = character(group, 12)
                output[written + 2] = character(group, 6)
                output[written + 3] = character(group, 0)
                (index, written) = (index + 3, written + 4)
            }
            let remaining = input.count - index
            if remaining > 0 {
                let group = UInt32(input[index]) << 16 | (remaining == 2 ? UInt32(input[index + 1]) << 8 : 0)
                output[written] = character(group, 18)
                output[written + 1] = character(group, 12)
                written += 2
                if remaining == 2 {
                    output[written] = character(group, 6)
                    written += 1
                }
            }
            return written
        }
    }

    /// nil for characters outside the alphabet or an impossible length.
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        Array(text.utf8).withUnsafeBufferPointer { decode($0, exactly: false) }
    }

    /// As `decode`, and nil too when the last character carries bits past the last byte (stray
    /// bits): what decodes encodes back to exactly `input`.
    public static func decodeExactly(_ input: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        decode(input, exactly: true)
    }

    private static func decode(_ input: UnsafeBufferPointer<UInt8>, exactly: Bool) -> [UInt8]? {
        guard input.count % 4 != 1 else { return nil }
        return values.withUnsafeBufferPointer { values in
            var decodable = true
            let output = [UInt8](unsafeUninitializedCapacity: input.count * 3 / 4) { output, written in
                var group: UInt32 = 0
                var bits = 0
                for character in input {
                    let value = values[Int(character)]
                    guard value != 0xFF else {
                        decodable = false
                        return
                    }
                    group = group << 6 | UInt32(value)
                    bits += 6
                    if bits >= 8 {
                        bits -= 8
                        output[written] = UInt8(truncatingIfNeeded: group >> UInt32(bits))
                        written += 1
                    }
                }
                if exactly, group & (1 << UInt32(bits) - 1) != 0 { decodable = false }
            }
            return decodable ? output : nil
        }
    }
}

/// Why a binary value could not be read.
struct BinaryDecodingError: Error {
    let message: String
}

/// The building blocks Avro's and Protobuf's binary encodings share: base-128 varints (and
/// their zig-zag signed form), little-endian fixed widths, and runs of bytes.
struct ByteCursor {
    private(set) var bytes: ArraySlice<UInt8>

    init(_ bytes: ArraySlice<UInt8>) {
        self.bytes = bytes
    }

    var isAtEnd: Bool { bytes.isEmpty }
    var remaining: Int { bytes.count }

    mutating func byte() throws(BinaryDecodingError) -> UInt8 {
        guard let first = bytes.first else { throw BinaryDecodingError(message: "the value ends early") }
        bytes = bytes.dropFirst()
        return first
    }

    mutating func varint() throws(BinaryDecodingError) -> UInt64 {
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            let next = try byte()
            result |= UInt64(next & 0x7F) << shift
            if next & 0x80 == 0 { return result }
            shift += 7
            guard shift < 70 else { throw BinaryDecodingError(message: "a varint longer than 10 bytes") }
        }
    }

    /// A zig-zag varint: 0, -1, 1, -2, … as 0, 1, 2, 3, ….
    mutating func signedVarint() throws(BinaryDecodingError) -> Int64 {
        Self.zigzag(try varint())
    }

    static func zigzag(_ raw: UInt64) -> Int64 {
        Int64(bitPattern: (raw >> 1) ^ (0 &- (raw & 1)))
    }

    mutating func littleEndian<Integer: FixedWidthInteger>(_: Integer.Type) throws(BinaryDecodingError) -> Integer {
        var value: Integer = 0
        for (index, byte) in try take(Integer.bitWidth / 8).enumerated() { value |= Integer(byte) << (8 * index) }
        return value
    }

    mutating func take(_ count: Int) throws(BinaryDecodingError) -> ArraySlice<UInt8> {
        guard count >= 0, count <= bytes.count else { throw BinaryDecodingError(message: "the value ends early") }
        defer { bytes = bytes.dropFirst(count) }
        return bytes.prefix(count)
    }
}

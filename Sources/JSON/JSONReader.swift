/// A pull reader of one JSON document, as strict as `JSONParser.parse`: the caller walks
/// objects member by member and arrays element by element, and takes the values it wants as
/// numbers, strings or whole `JSONValue`s; every other value is checked and passed over. No
/// dictionary is built for an object read this way, which is what a body of a hundred
/// locations costs the generic parser most.
///
/// Every value the walk reaches must be taken or skipped before the next member or element:
/// one left unread makes the next step fail as malformed, never pass silently. The reader
/// lives only inside `read`, over the bytes it was given.
public struct JSONReader {
    /// What a value is, seen from its first byte.
    public enum Kind: Sendable {
        case object, array, string, number, bool, null
    }

    /// A member of an object being walked: one of the fields asked for (its position among
    /// them), or another.
    public enum Member: Equatable, Sendable {
        case field(Int)
        case other
    }

    private var parser: JSONParser
    /// Set by `beginObject`/`beginArray` until their first member or element: a value may follow
    /// without a comma only there. One flag suffices: a nested container begins only after its
    /// parent handed out a member or element, which cleared the parent's.
    private var atContainerStart = false

    private init(parser: JSONParser) {
        self.parser = parser
    }

    /// Reads `bytes` as one document through `body`; a top-level value `body` leaves unread is
    /// checked, and anything after the value is an error. Throws `JSONParseError` for
    /// malformed input, or what `body` throws.
    public static func read<Result>(_ bytes: [UInt8], _ body: (inout JSONReader) throws -> Result) throws -> Result {
        try bytes.withUnsafeBufferPointer { buffer in
            var reader = JSONReader(parser: JSONParser(buffer: buffer))
            reader.parser.skipWhitespace()
            let start = reader.parser.position
            let result = try body(&reader)
            if reader.parser.position == start { try reader.skipValue() }
            guard reader.parser.depth == 0 else { throw reader.parser.error("an object or array was left unread") }
            reader.parser.skipWhitespace()
            guard reader.parser.position == buffer.count else { throw reader.parser.error("unexpected data after the JSON value") }
            return result
        }
    }

    /// The byte offset of the next value: with `offset` after it, the value's bytes.
    public var offset: Int { parser.position }

    /// The kind of the next value; nil when no value can begin here.
    public var kind: Kind? {
        guard parser.position < parser.buffer.count else { return nil }
        switch parser.buffer[parser.position] {
        case UInt8(ascii: "{"): return .object
        case UInt8(ascii: "["): return .array
        case UInt8(ascii: "\""): return .string
        case UInt8(ascii: "t"), UInt8(ascii: "f"): return .bool
        case UInt8(ascii: "n"): return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number
        default: return nil
        }
    }

    // MARK: Containers

    /// Enters the next value when it is an object; false (nothing read) when it is not.
    public mutating func beginObject() throws(JSONParseError) -> Bool {
        guard kind == .object else { return false }
        try parser.enterContainer()
        atContainerStart = true
        return true
    }

    /// The next member's key, matched against `fields`, with the reader before its value; nil
    /// once the object ended (and the reader is past it).
    public mutating func nextMember(in fields: JSONFieldNames) throws(JSONParseError) -> Member? {
        guard try proceed(closing: UInt8(ascii: "}")) else { return nil }
        guard parser.position < parser.buffer.count, parser.buffer[parser.position] == UInt8(ascii: "\"") else {
            throw parser.error("expected a string key")
        }
        let index = try parser.parseFieldIndex(in: fields)
        parser.skipWhitespace()
        guard parser.consume(UInt8(ascii: ":")) else { throw parser.error("expected ':'") }
        parser.skipWhitespace()
        return index.map(Member.field) ?? .other
    }

    /// Enters the next value when it is an array; false (nothing read) when it is not.
    public mutating func beginArray() throws(JSONParseError) -> Bool {
        guard kind == .array else { return false }
        try parser.enterContainer()
        atContainerStart = true
        return true
    }

    /// True with the reader before the next element; false once the array ended (and the
    /// reader is past it).
    public mutating func nextElement() throws(JSONParseError) -> Bool {
        try proceed(closing: UInt8(ascii: "]"))
    }

    /// Past the separator to the next member or element (true), or past the closing bracket (false).
    private mutating func proceed(closing: UInt8) throws(JSONParseError) -> Bool {
        parser.skipWhitespace()
        if parser.consume(closing) {
            atContainerStart = false
            parser.depth -= 1
            return false
        }
        if atContainerStart {
            atContainerStart = false
        } else {
            guard parser.consume(UInt8(ascii: ",")) else {
                throw parser.error(closing == UInt8(ascii: "}") ? "expected ',' or '}'" : "expected ',' or ']'")
            }
            parser.skipWhitespace()
        }
        guard parser.position < parser.buffer.count else { throw parser.error("unexpected end of input") }
        return true
    }

    // MARK: Values

    /// The next value when it is a number; nil (nothing read) when it is not.
    public mutating func readNumber() throws(JSONParseError) -> Double? {
        guard kind == .number else { return nil }
        return try parser.parseNumber()
    }

    /// The next value when it is a string; nil (nothing read) when it is not.
    public mutating func readString() throws(JSONParseError) -> String? {
        guard kind == .string else { return nil }
        return try parser.parseString()
    }

    /// The next value whole.
    public mutating func readValue() throws(JSONParseError) -> JSONValue {
        try parser.parseValue()
    }

    /// Checks the next value and passes over it.
    public mutating func skipValue() throws(JSONParseError) {
        _ = try parser.parseValue()
    }
}

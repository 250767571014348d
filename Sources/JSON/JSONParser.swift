#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

public struct JSONParseError: Error, Sendable, CustomStringConvertible {
    public let message: String
    public let offset: Int
    public var description: String { "\(message) at byte \(offset)" }
}

/// The names of the top-level fields a record is read for, as UTF-8 to match keys' bytes against.
/// The names lie one after another in one buffer: a key is matched against them all without
/// an array per name, each of which the comparison retained and released (ten keys a record,
/// several names each).
public struct JSONFieldNames: Sendable {
    private let bytes: [UInt8]
    /// Where each name ends in `bytes` (it starts where the one before ended).
    private let ends: [Int]

    public init(_ names: [String]) {
        self.bytes = names.flatMap(\.utf8)
        var end = 0
        self.ends = names.map { name in
            end += name.utf8.count
            return end
        }
    }

    public var count: Int { ends.count }

    func index(of key: UnsafeBufferPointer<UInt8>) -> Int? {
        bytes.withUnsafeBufferPointer { bytes in
            ends.withUnsafeBufferPointer { ends in
                var start = 0
                for (position, end) in ends.enumerated() {
                    if end - start == key.count, key.isEmpty || memcmp(bytes.baseAddress! + start, key.baseAddress!, key.count) == 0 {
                        return position
                    }
                    start = end
                }
                return nil
            }
        }
    }
}

/// A strict RFC 8259 parser over UTF-8 bytes. It validates UTF-8 as it goes
/// (invalid bytes are a parse error, never silently replaced) and bounds nesting.
public struct JSONParser {
    public static let maximumDepth = 64

    public static func parse(_ bytes: some Collection<UInt8>) throws(JSONParseError) -> JSONValue {
        let array = Array(bytes)
        return try array.withUnsafeBufferPointer { (buffer) throws(JSONParseError) -> JSONValue in
            var parser = JSONParser(buffer: buffer)
            return try parser.parseDocument()
        }
    }

    /// A document whose top level is an object is read into `values`, a slot per field asked for
    /// (by its position in `JSONFieldNames`; an absent field's slot is left as it was, the last
    /// of a repeated name counts, other fields are parsed and dropped), and gives nil; any other
    /// value is returned as it is. For records read field by field: keys are matched as bytes,
    /// with no string made, no dictionary is built or hashed, and a field's value is a
    /// `JSONField`, which points into `bytes` rather than holding a copy: nothing is allocated
    /// or released per field (the caller's slots are on its stack).
    public static func parseTopLevel(_ bytes: UnsafeBufferPointer<UInt8>, fields: JSONFieldNames,
                                     into values: UnsafeMutableBufferPointer<JSONField?>) throws(JSONParseError) -> JSONValue? {
        precondition(values.count == fields.count, "a slot per field")
        var parser = JSONParser(buffer: bytes)
        parser.skipWhitespace()
        guard parser.position < bytes.count, bytes[parser.position] == UInt8(ascii: "{") else {
            return try parser.parseDocument()
        }
        try parser.parseMembers(key: { (parser) throws(JSONParseError) in try parser.parseFieldIndex(in: fields) },
                                value: { (parser) throws(JSONParseError) in try parser.parseField() }) {
            if let index = $0 { values[index] = $1 }
        }
        parser.skipWhitespace()
        if parser.position != bytes.count { throw parser.error("unexpected data after the JSON value") }
        return nil
    }

    /// The text of a string `parseTopLevel` found in `bytes` (the same bytes: anything else is a
    /// programming error).
    public static func text(of string: JSONField.StringPlace, in bytes: UnsafeBufferPointer<UInt8>) -> String {
        guard string.escaped else { return String(decoding: UnsafeBufferPointer(rebasing: bytes[string.bytes]), as: UTF8.self) }
        var parser = JSONParser(buffer: bytes)
        parser.position = string.bytes.lowerBound - 1
        do {
            return try parser.parseString()
        } catch {
            preconditionFailure("a string the parser read once reads again: \(error)")
        }
    }

    public static func parse(_ text: String) throws(JSONParseError) -> JSONValue {
        try parse(Array(text.utf8))
    }

    let buffer: UnsafeBufferPointer<UInt8>
    var position = 0
    var depth = 0

    init(buffer: UnsafeBufferPointer<UInt8>) {
        self.buffer = buffer
    }

    mutating func parseDocument() throws(JSONParseError) -> JSONValue {
        skipWhitespace()
        let value = try parseValue()
        skipWhitespace()
        if position != buffer.count { throw error("unexpected data after the JSON value") }
        return value
    }

    func error(_ message: String) -> JSONParseError {
        JSONParseError(message: message, offset: position)
    }

    mutating func skipWhitespace() {
        while position < buffer.count {
            switch buffer[position] {
            case 0x20, 0x09, 0x0A, 0x0D: position += 1
            default: return
            }
        }
    }

    mutating func parseValue() throws(JSONParseError) -> JSONValue {
        guard position < buffer.count else { throw error("unexpected end of input") }
        switch buffer[position] {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try expectLiteral("true"); return .bool(true)
        case UInt8(ascii: "f"): try expectLiteral("false"); return .bool(false)
        case UInt8(ascii: "n"): try expectLiteral("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try parseNumber())
        default: throw error("unexpected character")
        }
    }

    /// A value as a record's field: a number read, a string's place, the type of anything else
    /// (parsed strictly, then dropped).
    mutating func parseField() throws(JSONParseError) -> JSONField {
        guard position < buffer.count else { throw error("unexpected end of input") }
        switch buffer[position] {
        case UInt8(ascii: "\""): return .string(try parseStringPlace())
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try parseNumber())
        default: return .other(try parseValue().type)
        }
    }

    private mutating func expectLiteral(_ literal: StaticString) throws(JSONParseError) {
        let count = literal.utf8CodeUnitCount
        guard position + count <= buffer.count else { throw error("unexpected end of input") }
        for index in 0..<count where buffer[position + index] != literal.utf8Start[index] {
            throw error("invalid literal")
        }
        position += count
    }

    mutating func enterContainer() throws(JSONParseError) {
        depth += 1
        if depth > Self.maximumDepth { throw error("nesting deeper than \(Self.maximumDepth)") }
        position += 1
        skipWhitespace()
    }

    private mutating func parseObject() throws(JSONParseError) -> JSONValue {
        // Room for an event's fields at once: growing from empty rehashes three times.
        var members = [String: JSONValue](minimumCapacity: 12)
        try parseMembers(key: { (parser) throws(JSONParseError) in try parser.parseString() },
                         value: { (parser) throws(JSONParseError) in try parser.parseValue() }) { members[$0] = $1 }
        return .object(members)
    }

    /// An object's members, each handed to `take` in order with its key as `parseKey` reads it
    /// and its value as `parseValue` reads it.
    @inline(__always)  // specialized for its readers: through a closure context an event took a quarter longer
    private mutating func parseMembers<Key, Value>(key parseKey: (inout JSONParser) throws(JSONParseError) -> Key,
                                                   value parseValue: (inout JSONParser) throws(JSONParseError) -> Value,
                                                   _ take: (Key, Value) -> Void) throws(JSONParseError) {
        try enterContainer()
        defer { depth -= 1 }
        if consume(UInt8(ascii: "}")) { return }
        while true {
            guard position < buffer.count, buffer[position] == UInt8(ascii: "\"") else {
                throw error("expected a string key")
            }
            let key = try parseKey(&self)
            skipWhitespace()
            guard consume(UInt8(ascii: ":")) else { throw error("expected ':'") }
            skipWhitespace()
            take(key, try parseValue(&self))
            skipWhitespace()
            if consume(UInt8(ascii: "}")) { return }
            guard consume(UInt8(ascii: ",")) else { throw error("expected ',' or '}'") }
            skipWhitespace()
        }
    }

    private mutating func parseArray() throws(JSONParseError) -> JSONValue {
        try enterContainer()
        defer { depth -= 1 }
        var elements: [JSONValue] = []
        if consume(UInt8(ascii: "]")) { return .array(elements) }
        while true {
            elements.append(try parseValue())
            skipWhitespace()
            if consume(UInt8(ascii: "]")) { return .array(elements) }
            guard consume(UInt8(ascii: ",")) else { throw error("expected ',' or ']'") }
            skipWhitespace()
        }
    }

    mutating func consume(_ byte: UInt8) -> Bool {
        guard position < buffer.count, buffer[position] == byte else { return false }
        position += 1
        return true
    }

    // MARK: Strings

    /// A key's position among `fields`, nil for any other key. A key without escapes (every
    /// key, in practice) is matched as the bytes it is; one with escapes is decoded first.
    mutating func parseFieldIndex(in fields: JSONFieldNames) throws(JSONParseError) -> Int? {
        let key = try parseStringPlace()
        guard key.escaped else { return fields.index(of: UnsafeBufferPointer(rebasing: buffer[key.bytes])) }
        return Array(Self.text(of: key, in: buffer).utf8).withUnsafeBufferPointer { fields.index(of: $0) }
    }

    /// Where a string's bytes lie, checked as `parseString` checks them, without making it.
    mutating func parseStringPlace() throws(JSONParseError) -> JSONField.StringPlace {
        let opening = position
        if try scanUnescaped() { return JSONField.StringPlace(bytes: (opening + 1)..<(position - 1), escaped: false) }
        position = opening
        _ = try parseString()
        return JSONField.StringPlace(bytes: (opening + 1)..<(position - 1), escaped: true)
    }

    /// Reads a string from its opening quote while its bytes are its text: true when its closing
    /// quote came (and was read), false at its first escape, where reading stopped.
    private mutating func scanUnescaped() throws(JSONParseError) -> Bool {
        position += 1  // opening quote
        while position < buffer.count {
            let byte = buffer[position]
            if byte == UInt8(ascii: "\"") {
                position += 1
                return true
            }
            if byte == UInt8(ascii: "\\") { return false }
            if byte < 0x20 { throw error("control character in string") }
            if byte >= 0x80 { try skipMultibyteScalar() } else { position += 1 }
        }
        throw error("unterminated string")
    }

    mutating func parseString() throws(JSONParseError) -> String {
        let start = position + 1
        // Fast path: no escapes, so the string is a slice of the input.
        if try scanUnescaped() {
            return String(decoding: UnsafeBufferPointer(rebasing: buffer[start..<(position - 1)]), as: UTF8.self)
        }
        var bytes = Array(UnsafeBufferPointer(rebasing: buffer[start..<position]))
        while position < buffer.count {
            let byte = buffer[position]
            switch byte {
            case UInt8(ascii: "\""):
                position += 1
                return String(decoding: bytes, as: UTF8.self)
            case UInt8(ascii: "\\"):
                try appendEscape(to: &bytes)
            case 0..<0x20:
                throw error("control character in string")
            case 0x80...:
                let scalarStart = position
                try skipMultibyteScalar()
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[scalarStart..<position]))
            default:
                bytes.append(byte)
                position += 1
            }
        }
        throw error("unterminated string")
    }

    private mutating func appendEscape(to bytes: inout [UInt8]) throws(JSONParseError) {
        position += 1
        guard position < buffer.count else { throw error("unterminated escape") }
        let escaped = buffer[position]
        position += 1
        switch escaped {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): bytes.append(escaped)
        case UInt8(ascii: "b"): bytes.append(0x08)
        case UInt8(ascii: "f"): bytes.append(0x0C)
        case UInt8(ascii: "n"): bytes.append(0x0A)
        case UInt8(ascii: "r"): bytes.append(0x0D)
        case UInt8(ascii: "t"): bytes.append(0x09)
        case UInt8(ascii: "u"):
            var scalar = try parseHex4()
            if (0xD800...0xDBFF).contains(scalar) {
                guard consume(UInt8(ascii: "\\")), consume(UInt8(ascii: "u")) else {
                    throw error("unpaired surrogate")
                }
                let low = try parseHex4()
                guard (0xDC00...0xDFFF).contains(low) else { throw error("unpaired surrogate") }
                scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
            } else if (0xDC00...0xDFFF).contains(scalar) {
                throw error("unpaired surrogate")
            }
            bytes.append(contentsOf: String(Character(Unicode.Scalar(scalar)!)).utf8)
        default:
            throw error("invalid escape")
        }
    }

    private mutating func parseHex4() throws(JSONParseError) -> UInt32 {
        guard position + 4 <= buffer.count else { throw error("truncated \\u escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = buffer[position]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw error("invalid \\u escape")
            }
            value = value << 4 | UInt32(digit)
            position += 1
        }
        return value
    }

    /// Validates one multi-byte UTF-8 sequence (RFC 3629: no overlongs, no surrogates).
    private mutating func skipMultibyteScalar() throws(JSONParseError) {
        let lead = buffer[position]
        let length: Int
        var lowerBound: UInt8 = 0x80
        var upperBound: UInt8 = 0xBF
        switch lead {
        case 0xC2...0xDF: length = 2
        case 0xE0: length = 3; lowerBound = 0xA0
        case 0xE1...0xEC, 0xEE...0xEF: length = 3
        case 0xED: length = 3; upperBound = 0x9F
        case 0xF0: length = 4; lowerBound = 0x90
        case 0xF1...0xF3: length = 4
        case 0xF4: length = 4; upperBound = 0x8F
        default: throw error("invalid UTF-8")
        }
        guard position + length <= buffer.count else { throw error("truncated UTF-8") }
        let second = buffer[position + 1]
        guard second >= lowerBound, second <= upperBound else { throw error("invalid UTF-8") }
        for index in 2..<max(length, 2) where buffer[position + index] & 0xC0 != 0x80 {
            throw error("invalid UTF-8")
        }
        position += length
    }

    // MARK: Numbers

    /// A number's value. A plain decimal (`-12.345`: no exponent, at most 15 digits) is read
    /// in the same pass that checks its syntax, without strtod: its digits as an integer below
    /// 2^53 and a power of ten up to 10^22 are both exact doubles, so their quotient is the
    /// correctly rounded value, the same as strtod's (Clinger's fast path). Coordinates and
    /// speeds in every event are such numbers; any other goes to strtod.
    mutating func parseNumber() throws(JSONParseError) -> Double {
        let start = position
        let negative = consume(UInt8(ascii: "-"))
        var digits: UInt64 = 0
        var digitCount = 0
        if consume(UInt8(ascii: "0")) {
            digitCount = 1  // a leading zero stands alone
        } else if !consumeDigits(into: &digits, count: &digitCount) {
            throw error("invalid number")
        }
        var fractionDigits = 0
        if consume(UInt8(ascii: ".")) {
            let integerDigits = digitCount
            if !consumeDigits(into: &digits, count: &digitCount) { throw error("invalid number") }
            fractionDigits = digitCount - integerDigits
        }
        if consume(UInt8(ascii: "e")) || consume(UInt8(ascii: "E")) {
            if !consume(UInt8(ascii: "+")) { _ = consume(UInt8(ascii: "-")) }
            // Its digits are only checked: strtod reads the number.
            var (exponent, exponentDigits): (UInt64, Int) = (0, 0)
            if !consumeDigits(into: &exponent, count: &exponentDigits) { throw error("invalid number") }
            return Self.double(from: UnsafeBufferPointer(rebasing: buffer[start..<position]))
        }
        guard digitCount <= 15 else {
            return Self.double(from: UnsafeBufferPointer(rebasing: buffer[start..<position]))
        }
        let value = Double(digits) / Self.exactPowersOfTen[fractionDigits]
        return negative ? -value : value
    }

    /// Powers of ten a double holds exactly.
    private static let exactPowersOfTen: [Double] = (0...22).map { exponent in
        (0..<exponent).reduce(1.0) { power, _ in power * 10 }
    }

    /// Consumes a run of digits, adding them to `value` (wrapping: past 15 digits the value is
    /// not used) and to `count`. False when there is none.
    private mutating func consumeDigits(into value: inout UInt64, count: inout Int) -> Bool {
        let start = position
        while position < buffer.count {
            let digit = buffer[position] &- UInt8(ascii: "0")
            guard digit < 10 else { break }
            value = value &* 10 &+ UInt64(digit)
            position += 1
        }
        count += position - start
        return position > start
    }

    /// The token is already validated JSON number syntax, which strtod accepts whole.
    private static func double(from token: UnsafeBufferPointer<UInt8>) -> Double {
        withUnsafeTemporaryAllocation(of: CChar.self, capacity: token.count + 1) { cString in
            for (index, byte) in token.enumerated() { cString[index] = CChar(bitPattern: byte) }
            cString[token.count] = 0
            return strtod(cString.baseAddress!, nil)
        }
    }
}

/// Building blocks for writing JSON text by hand, which keeps hot paths free of
/// reflection-based encoders and makes the output byte-for-byte predictable.
public enum JSONText {
    /// `value` as a JSON string literal, escaping quotes, backslashes and control characters.
    public static func quoted(_ value: String) -> String {
        var bytes: [UInt8] = []
        appendQuoted(value, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Appends `value` as a JSON string literal; the common case (nothing to escape) copies its bytes whole.
    public static func appendQuoted(_ value: String, to bytes: inout [UInt8]) {
        bytes.append(UInt8(ascii: "\""))
        let copiedWhole = value.utf8.withContiguousStorageIfAvailable { utf8 -> Bool in
            for byte in utf8 where needsEscape(byte) { return false }
            bytes.append(contentsOf: utf8)
            return true
        } ?? false
        if !copiedWhole {
            for byte in value.utf8 { appendEscaped(byte, to: &bytes) }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    private static func needsEscape(_ byte: UInt8) -> Bool {
        byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\")
    }

    /// One UTF-8 byte of a string literal; bytes of multi-byte characters pass through unchanged.
    private static func appendEscaped(_ byte: UInt8, to bytes: inout [UInt8]) {
        guard needsEscape(byte) else { return bytes.append(byte) }
        bytes.append(UInt8(ascii: "\\"))
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"): bytes.append(byte)
        case UInt8(ascii: "\n"): bytes.append(UInt8(ascii: "n"))
        case UInt8(ascii: "\r"): bytes.append(UInt8(ascii: "r"))
        case UInt8(ascii: "\t"): bytes.append(UInt8(ascii: "t"))
        default:
            let hexDigits = Array("0123456789abcdef".utf8)
            bytes.append(contentsOf: [UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"),
                                      hexDigits[Int(byte >> 4)], hexDigits[Int(byte & 0xF)]])
        }
    }

    /// A finite double in JSON number syntax (Swift's shortest round-trip form).
    public static func number(_ value: Double) -> String {
        precondition(value.isFinite, "JSON has no representation for \(value)")
        if value == value.rounded(), abs(value) < 1e15 {
            return String(Int64(value))
        }
        return value.description
    }
}

/// Accumulates one JSON object's members in insertion order, in a single growing buffer:
/// nested objects are written in place rather than built apart and copied in.
public struct JSONObjectWriter: Sendable {
    private var text: [UInt8]
    private var isEmpty = true

    public init(reservingCapacity capacity: Int = 0) {
        text = [UInt8(ascii: "{")]
        if capacity > 0 { text.reserveCapacity(capacity) }
    }

    /// Continues `buffer` with a nested object; the buffer moves in, so nothing is copied.
    private init(continuing buffer: inout [UInt8]) {
        text = []
        swap(&text, &buffer)
        text.append(UInt8(ascii: "{"))
    }

    public mutating func add(_ key: String, _ value: String) {
        appendKey(key)
        JSONText.appendQuoted(value, to: &text)
    }

    public mutating func add(_ key: String, _ value: Double) {
        addRaw(key, JSONText.number(value))
    }

    public mutating func add(_ key: String, _ value: Int) {
        addRaw(key, String(value))
    }

    public mutating func add(_ key: String, _ value: Bool) {
        addRaw(key, value ? "true" : "false")
    }

    public mutating func add(_ key: String, _ object: JSONObjectWriter) {
        appendKey(key)
        text.append(contentsOf: object.text)
        text.append(UInt8(ascii: "}"))
    }

    public mutating func add(_ key: String, _ objects: [JSONObjectWriter]) {
        appendKey(key)
        text.append(UInt8(ascii: "["))
        for (index, object) in objects.enumerated() {
            if index > 0 { text.append(UInt8(ascii: ",")) }
            text.append(contentsOf: object.text)
            text.append(UInt8(ascii: "}"))
        }
        text.append(UInt8(ascii: "]"))
    }

    /// Writes a nested object member in place.
    public mutating func addObject(_ key: String, _ build: (inout JSONObjectWriter) -> Void) {
        appendKey(key)
        appendObject(build)
    }

    /// Writes an array member holding one object per element, each in place.
    public mutating func addObjects<Elements: Sequence>(
        _ key: String, _ elements: Elements, _ build: (inout JSONObjectWriter, Elements.Element) -> Void
    ) {
        appendKey(key)
        text.append(UInt8(ascii: "["))
        var first = true
        for element in elements {
            if !first { text.append(UInt8(ascii: ",")) }
            first = false
            appendObject { build(&$0, element) }
        }
        text.append(UInt8(ascii: "]"))
    }

    /// Adds a member whose value is already valid JSON text.
    public mutating func addRaw(_ key: String, _ json: String) {
        appendKey(key)
        text.append(contentsOf: json.utf8)
    }

    public var json: String { String(decoding: bytes, as: UTF8.self) }

    /// The object's UTF-8 text (the closing brace added to a copy, so the writer stays open).
    public var bytes: [UInt8] {
        var closed = text
        closed.append(UInt8(ascii: "}"))
        return closed
    }

    private mutating func appendKey(_ key: String) {
        if !isEmpty { text.append(UInt8(ascii: ",")) }
        isEmpty = false
        JSONText.appendQuoted(key, to: &text)
        text.append(UInt8(ascii: ":"))
    }

    private mutating func appendObject(_ build: (inout JSONObjectWriter) -> Void) {
        var nested = JSONObjectWriter(continuing: &text)
        build(&nested)
        nested.text.append(UInt8(ascii: "}"))
        swap(&text, &nested.text)
    }
}

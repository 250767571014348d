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

    /// Appends what `number` returns, without making a string of it: every coordinate sent goes
    /// through here.
    public static func appendNumber(_ value: Double, to bytes: inout [UInt8]) {
        precondition(value.isFinite, "JSON has no representation for \(value)")
        if value == value.rounded(), abs(value) < 1e15 {
            bytes.append(contentsOf: String(Int64(value)).utf8)  // at most 16 bytes: a string that allocates nothing
            return
        }
        var output = ByteOutput()
        swap(&output.bytes, &bytes)
        value.write(to: &output)
        swap(&output.bytes, &bytes)
    }
}

/// What `Double.write(to:)` writes, appended to bytes. The standard library hands a number's
/// digits to `_writeASCII` from a buffer on the stack; `write(_:)` serves any other text.
private struct ByteOutput: TextOutputStream {
    var bytes: [UInt8] = []

    mutating func write(_ string: String) { bytes.append(contentsOf: string.utf8) }

    mutating func _writeASCII(_ buffer: UnsafeBufferPointer<UInt8>) { bytes.append(contentsOf: buffer) }
}

/// A member name quoted once, with its colon: a writer copies it in with nothing to check.
public struct JSONKey: Sendable {
    fileprivate let quotedWithColon: [UInt8]

    public init(_ name: String) {
        var bytes: [UInt8] = []
        JSONText.appendQuoted(name, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
        quotedWithColon = bytes
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
        appendKey(key)
        JSONText.appendNumber(value, to: &text)
    }

    public mutating func add(_ key: JSONKey, _ value: Double) {
        appendKey(key)
        JSONText.appendNumber(value, to: &text)
    }

    public mutating func add(_ key: JSONKey, _ value: Int) {
        appendKey(key)
        text.append(contentsOf: String(value).utf8)
    }

    public mutating func add(_ key: JSONKey, _ value: String) {
        appendKey(key)
        JSONText.appendQuoted(value, to: &text)
    }

    /// Adds a string member of `count` bytes that `write` puts in place; they must need no
    /// escaping (a timestamp, say), and `write` must initialize every one of them.
    public mutating func addUnescapedString(_ key: JSONKey, count: Int, _ write: (UnsafeMutableBufferPointer<UInt8>) -> Void) {
        appendKey(key)
        text.append(UInt8(ascii: "\""))
        let start = text.count
        text.append(contentsOf: repeatElement(0, count: count))
        text.withUnsafeMutableBufferPointer { write(UnsafeMutableBufferPointer(rebasing: $0[start...])) }
        text.append(UInt8(ascii: "\""))
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

    public mutating func addObject(_ key: JSONKey, _ build: (inout JSONObjectWriter) -> Void) {
        appendKey(key)
        appendObject(build)
    }

    /// Writes an array member holding one object per element, each in place.
    public mutating func addObjects<Elements: Sequence>(
        _ key: String, _ elements: Elements, _ build: (inout JSONObjectWriter, Elements.Element) -> Void
    ) {
        addObjects(JSONKey(key), elements, build)
    }

    public mutating func addObjects<Elements: Sequence>(
        _ key: JSONKey, _ elements: Elements, _ build: (inout JSONObjectWriter, Elements.Element) -> Void
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

    /// The object's UTF-8 text, closed in place: the writer's buffer becomes it, uncopied.
    public consuming func finished() -> [UInt8] {
        text.append(UInt8(ascii: "}"))
        return text
    }

    private mutating func appendKey(_ key: String) {
        if !isEmpty { text.append(UInt8(ascii: ",")) }
        isEmpty = false
        JSONText.appendQuoted(key, to: &text)
        text.append(UInt8(ascii: ":"))
    }

    private mutating func appendKey(_ key: JSONKey) {
        if !isEmpty { text.append(UInt8(ascii: ",")) }
        isEmpty = false
        text.append(contentsOf: key.quotedWithColon)
    }

    private mutating func appendObject(_ build: (inout JSONObjectWriter) -> Void) {
        var nested = JSONObjectWriter(continuing: &text)
        build(&nested)
        nested.text.append(UInt8(ascii: "}"))
        swap(&text, &nested.text)
    }
}

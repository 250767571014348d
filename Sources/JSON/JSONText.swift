/// Building blocks for writing JSON text by hand, which keeps hot paths free of
/// reflection-based encoders and makes the output byte-for-byte predictable.
public enum JSONText {
    /// `value` as a JSON string literal, escaping quotes, backslashes and control characters.
    public static func quoted(_ value: String) -> String {
        var text = "\""
        text.reserveCapacity(value.utf8.count + 2)
        var needsEscaping = false
        for byte in value.utf8 where byte < 0x20 || byte == 0x22 || byte == 0x5C {
            needsEscaping = true
            break
        }
        if !needsEscaping {
            text += value
        } else {
            for scalar in value.unicodeScalars {
                switch scalar {
                case "\"": text += "\\\""
                case "\\": text += "\\\\"
                case "\n": text += "\\n"
                case "\r": text += "\\r"
                case "\t": text += "\\t"
                case _ where scalar.value < 0x20:
                    let hex = String(scalar.value, radix: 16)
                    text += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                default: text.unicodeScalars.append(scalar)
                }
            }
        }
        text += "\""
        return text
    }

    /// A finite double in JSON number syntax (Swift's shortest round-trip form).
    public static func number(_ value: Double) -> String {
        precondition(value.isFinite, "JSON has no representation for \(value)")
        if value == value.rounded(), abs(value) < 1e15 {
            return String(Int64(value))
        }
        return "\(value)"
    }
}

/// Accumulates one JSON object's members in insertion order.
public struct JSONObjectWriter: Sendable {
    private var text = "{"
    private var isEmpty = true

    public init() {}

    public mutating func add(_ key: String, _ value: String) {
        addRaw(key, JSONText.quoted(value))
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
        addRaw(key, object.text + "}")
    }

    public mutating func add(_ key: String, _ objects: [JSONObjectWriter]) {
        addRaw(key, "[" + objects.map { $0.text + "}" }.joined(separator: ",") + "]")
    }

    /// Adds a member whose value is already valid JSON text.
    public mutating func addRaw(_ key: String, _ json: String) {
        if !isEmpty { text += "," }
        isEmpty = false
        text += JSONText.quoted(key)
        text += ":"
        text += json
    }

    public var json: String { text + "}" }
}

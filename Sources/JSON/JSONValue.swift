/// A parsed JSON document. Numbers are kept as `Double` (as JSON defines them);
/// a number too large for a double parses as ±infinity so that callers can
/// report it as out of range rather than as malformed.
public enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public subscript(key: String) -> JSONValue? {
        if case .object(let members) = self { return members[key] }
        return nil
    }

    public var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    public var numberValue: Double? {
        if case .number(let value) = self { return value }
        return nil
    }

    public var objectValue: [String: JSONValue]? {
        if case .object(let members) = self { return members }
        return nil
    }

    public var arrayValue: [JSONValue]? {
        if case .array(let elements) = self { return elements }
        return nil
    }

    /// The value's JSON type.
    public var type: JSONType {
        switch self {
        case .null: .null
        case .bool: .boolean
        case .number: .number
        case .string: .string
        case .array: .array
        case .object: .object
        }
    }

    /// A short name of the value's JSON type, for error messages.
    public var typeName: String { type.rawValue }
}

/// JSON's types, as error messages name them.
public enum JSONType: String, Sendable {
    case null, boolean, number, string, array, object
}

extension JSONValue {
    /// Compact JSON text with object keys sorted, so output is deterministic.
    public func serialized() -> String {
        var text = ""
        write(to: &text)
        return text
    }

    private func write(to text: inout String) {
        switch self {
        case .null: text += "null"
        case .bool(let value): text += value ? "true" : "false"
        case .number(let value): text += JSONText.number(value)
        case .string(let value): text += JSONText.quoted(value)
        case .array(let elements):
            text += "["
            for (index, element) in elements.enumerated() {
                if index > 0 { text += "," }
                element.write(to: &text)
            }
            text += "]"
        case .object(let members):
            text += "{"
            for (index, key) in members.keys.sorted().enumerated() {
                if index > 0 { text += "," }
                text += JSONText.quoted(key)
                text += ":"
                members[key]!.write(to: &text)
            }
            text += "}"
        }
    }
}

/// A record's top-level field as `JSONParser.parseTopLevel` reads it: a number's value, where a
/// string lies in the record's bytes (made into text only when asked, by `JSONParser.text`), or
/// the kind of anything else. It holds no reference: a record's fields are neither allocated
/// nor released one by one.
public enum JSONField: Sendable, Equatable {
    /// A string's bytes between its quotes, and whether they hold escapes to decode.
    public struct StringPlace: Sendable, Equatable {
        public let bytes: Range<Int>
        public let escaped: Bool
    }

    case null
    case bool
    case number(Double)
    case string(StringPlace)
    case array
    case object

    /// A short name of the value's JSON type, for error messages, as `JSONValue.typeName` says it.
    public var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "boolean"
        case .number: "number"
        case .string: "string"
        case .array: "array"
        case .object: "object"
        }
    }
}

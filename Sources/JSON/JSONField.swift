/// A record's top-level field as `JSONParser.parseTopLevel` reads it: a number's value, where a
/// string lies in the record's bytes (made into text only when asked, by `JSONParser.text`), or
/// the type of anything else. It holds no reference: a record's fields are neither allocated
/// nor released one by one.
public enum JSONField: Sendable, Equatable {
    /// A string's bytes between its quotes, and whether they hold escapes to decode.
    public struct StringPlace: Sendable, Equatable {
        public let bytes: Range<Int>
        public let escaped: Bool
    }

    case number(Double)
    case string(StringPlace)
    /// `null`, a boolean, an array or an object: checked, not kept.
    case other(JSONType)

    public var isNull: Bool { self == .other(.null) }

    /// The value's JSON type.
    public var type: JSONType {
        switch self {
        case .number: .number
        case .string: .string
        case .other(let type): type
        }
    }

    /// A short name of the value's JSON type, for error messages.
    public var typeName: String { type.rawValue }
}

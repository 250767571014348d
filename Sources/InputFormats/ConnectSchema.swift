import Foundation
import JSON

/// Values from Kafka Connect's JSON converter with schemas (`schemas.enable=true`): the record
/// is `{"schema": …, "payload": …}` and each field's schema may name a semantic type that the
/// JSON value alone does not tell. Debezium's defaults need it:
/// - a PostgreSQL `timestamp` is `io.debezium.time.MicroTimestamp`, integer microseconds that
///   would read as milliseconds; `NanoTimestamp` nanoseconds; `Timestamp` (Debezium's and
///   Connect's) milliseconds; `ZonedTimestamp` RFC 3339 text;
/// - a `numeric` column under `decimal.handling.mode=precise` is
///   `org.apache.kafka.connect.data.Decimal`, the unscaled value as big-endian two's-complement
///   bytes in base64 with the scale in the schema's parameters (or
///   `io.debezium.data.VariableScaleDecimal`, `{"scale", "value"}`).
/// Such fields of the object the envelope names are made what the mapping reads: epoch
/// milliseconds and plain numbers.
enum ConnectSchema {
    /// `object` (found at `path` in `document`) with its semantic-typed fields converted, when
    /// the document carries a schema for it.
    static func normalize(_ object: JSONValue, at path: ValuePath, in document: JSONValue) -> JSONValue {
        guard case .object(var fields) = object, let schema = structSchema(at: path, in: document) else { return object }
        for field in schema["fields"]?.arrayValue ?? [] {
            guard let name = field["field"]?.stringValue, let value = fields[name], let semantic = field["name"]?.stringValue,
                  let converted = convert(value, semantic: semantic, parameters: field["parameters"])
            else { continue }
            fields[name] = converted
        }
        return .object(fields)
    }

    /// The struct schema describing the value at `path`: the document's `schema` describes its
    /// `payload`, and each later step is one of its struct fields.
    static func structSchema(at path: ValuePath, in document: JSONValue) -> JSONValue? {
        guard case .key("payload")? = path.steps.first, var schema = document["schema"] else { return nil }
        for step in path.steps.dropFirst() {
            guard case .key(let name) = step,
                  let field = schema["fields"]?.arrayValue?.first(where: { $0["field"]?.stringValue == name })
            else { return nil }
            schema = field
        }
        return schema["type"]?.stringValue == "struct" ? schema : nil
    }

    static func convert(_ value: JSONValue, semantic: String, parameters: JSONValue?) -> JSONValue? {
        switch (semantic, value) {
        case ("io.debezium.time.MicroTimestamp", .number(let micros)):
            return .number((micros / 1000).rounded(.down))
        case ("io.debezium.time.NanoTimestamp", .number(let nanos)):
            return .number((nanos / 1_000_000).rounded(.down))
        case ("org.apache.kafka.connect.data.Decimal", .string(let base64)):
            let scale = parameters?["scale"]?.stringValue.flatMap(Int.init) ?? 0
            return decimal(base64, scale: scale).map(JSONValue.number)
        case ("io.debezium.data.VariableScaleDecimal", .object(let parts)):
            guard let base64 = parts["value"]?.stringValue, let scale = parts["scale"]?.numberValue else { return nil }
            return decimal(base64, scale: Int(scale)).map(JSONValue.number)
        default:
            return nil  // milliseconds (Timestamp) and RFC 3339 text (ZonedTimestamp) read as they are
        }
    }

    /// A big-endian two's-complement unscaled integer (base64) divided by 10^scale.
    static func decimal(_ base64: String, scale: Int) -> Double? {
        guard let bytes = Data(base64Encoded: base64), !bytes.isEmpty, bytes.count <= 16 else { return nil }
        var unscaled = 0.0
        for byte in bytes { unscaled = unscaled * 256 + Double(byte) }
        if bytes.first! & 0x80 != 0 { unscaled -= pow(256, Double(bytes.count)) }
        return unscaled / pow(10, Double(scale))
    }
}

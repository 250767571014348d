import InputFormats

/// A Protobuf schema as `.proto` text, the form Confluent's registry answers unless asked for
/// `format=serialized`: its top-level messages with their nested ones, fields with their
/// types (fully qualified for messages and enums), map fields as `map<K, V>`.
enum ProtoText {
    static func render(_ schema: ProtobufSchema, syntax: String = "proto3") -> String {
        var lines = ["syntax = \"\(syntax)\";", ""]
        for name in schema.topLevel { lines += message(name, in: schema, indent: "") }
        return lines.joined(separator: "\n") + "\n"
    }

    private static func message(_ fullName: String, in schema: ProtobufSchema, indent: String) -> [String] {
        guard let message = schema.messages[fullName], !message.isMapEntry else { return [] }
        var lines = ["\(indent)message \(fullName.split(separator: ".").last.map(String.init) ?? fullName) {"]
        for nested in message.nested { lines += self.message(nested, in: schema, indent: indent + "  ") }
        for field in message.fields.values.sorted(by: { $0.number < $1.number }) {
            lines.append("\(indent)  \(declaration(field, in: schema)) \(field.name) = \(field.number);")
        }
        lines.append("\(indent)}")
        return lines
    }

    private static func declaration(_ field: ProtobufSchema.Field, in schema: ProtobufSchema) -> String {
        if field.repeated, let entry = schema.messages[field.typeName], entry.isMapEntry,
           let key = entry.fields[1], let value = entry.fields[2] {
            return "map<\(type(key)), \(type(value))>"
        }
        return (field.repeated ? "repeated " : "") + type(field)
    }

    private static let scalarNames = [
        1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64", 7: "fixed32", 8: "bool", 9: "string",
        12: "bytes", 13: "uint32", 15: "sfixed32", 16: "sfixed64", 17: "sint32", 18: "sint64",
    ]

    private static func type(_ field: ProtobufSchema.Field) -> String {
        field.type == 11 || field.type == 14 ? field.typeName : scalarNames[field.type] ?? "bytes"
    }
}

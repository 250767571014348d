import Foundation
import JSON

/// Protobuf messages decoded at run time from the descriptors the Schema Registry holds
/// (`FileDescriptorProto`s, its serialized format), into the same document a JSON record
/// gives: messages are objects keyed by field name, enums their value's name, map fields
/// objects, `google.protobuf.Timestamp` epoch milliseconds, wrappers their value, bytes
/// base64 text. In proto3, scalar fields without presence read as their zero value when
/// absent from the wire, as proto3 defines them.
public struct ProtobufSchema: Sendable {
    package struct Field: Sendable {
        package let name: String
        package let number: Int
        /// FieldDescriptorProto.Type: 9 string, 11 message, 14 enum, …
        package let type: Int
        package let repeated: Bool
        let packed: Bool?
        /// Fully qualified, with a leading dot, for messages and enums.
        package let typeName: String
        /// proto3 scalar without explicit presence: absent means zero.
        let impliedZero: Bool
    }

    package struct Message: Sendable {
        package let fullName: String
        package let fields: [Int: Field]
        package let isMapEntry: Bool
        /// Nested message names, by declaration index (message indexes in the framing).
        package let nested: [String]
    }

    public struct ParseError: Error, CustomStringConvertible {
        public let description: String
    }

    package let messages: [String: Message]
    package let enums: [String: [Int: String]]
    /// The top-level messages of the schema's own file, by declaration index.
    package let topLevel: [String]

    /// - Parameters:
    ///   - file: the schema's serialized `FileDescriptorProto`.
    ///   - dependencies: the descriptors of the files it imports (the registry's references).
    public init(file: [UInt8], dependencies: [[UInt8]]) throws(ParseError) {
        var messages: [String: Message] = [:]
        var enums: [String: [Int: String]] = [:]
        var topLevel: [String] = []
        for (index, bytes) in ([file] + dependencies).enumerated() {
            let parsed = try DescriptorReader.file(bytes)
            for message in parsed.messages { messages[message.fullName] = message }
            for (name, values) in parsed.enums { enums[name] = values }
            if index == 0 { topLevel = parsed.topLevel }
        }
        self.messages = messages
        self.enums = enums
        self.topLevel = topLevel
    }

    /// The message the framing's indexes name: the first index into the file's messages,
    /// the next ones into nested messages.
    func message(at indexes: [Int]) -> Message? {
        guard let first = indexes.first, topLevel.indices.contains(first), var message = messages[topLevel[first]] else { return nil }
        for index in indexes.dropFirst() {
            guard message.nested.indices.contains(index), let nested = messages[message.nested[index]] else { return nil }
            message = nested
        }
        return message
    }
}

/// The few fields of descriptor.proto a decoder needs, read with the same wire reader.
private enum DescriptorReader {
    struct File {
        var messages: [ProtobufSchema.Message] = []
        var enums: [String: [Int: String]] = [:]
        var topLevel: [String] = []
    }

    static func file(_ bytes: [UInt8]) throws(ProtobufSchema.ParseError) -> File {
        var reader = ProtobufWireReader(bytes[...])
        var package = ""
        var syntax = "proto2"
        var messageBytes: [ArraySlice<UInt8>] = []
        var enumBytes: [ArraySlice<UInt8>] = []
        do {
            while let (number, value) = try reader.nextField() {
                switch (number, value) {
                case (2, .bytes(let text)): package = String(decoding: text, as: UTF8.self)
                case (4, .bytes(let message)): messageBytes.append(message)
                case (5, .bytes(let enumeration)): enumBytes.append(enumeration)
                case (12, .bytes(let text)): syntax = String(decoding: text, as: UTF8.self)
                default: break
                }
            }
            var file = File()
            let scope = package.isEmpty ? "" : "." + package
            for bytes in messageBytes {
                let name = try message(bytes, scope: scope, proto3: syntax == "proto3", into: &file)
                file.topLevel.append(name)
            }
            for bytes in enumBytes { try enumeration(bytes, scope: scope, into: &file) }
            return file
        } catch {
            throw ProtobufSchema.ParseError(description: "not a FileDescriptorProto: \(error.message)")
        }
    }

    /// Reads a DescriptorProto and its nested types; returns its full name.
    static func message(_ bytes: ArraySlice<UInt8>, scope: String, proto3: Bool,
                        into file: inout File) throws(ProtobufWireReader.Failure) -> String {
        var reader = ProtobufWireReader(bytes)
        var name = ""
        var fieldBytes: [ArraySlice<UInt8>] = []
        var nestedBytes: [ArraySlice<UInt8>] = []
        var enumBytes: [ArraySlice<UInt8>] = []
        var isMapEntry = false
        while let (number, value) = try reader.nextField() {
            switch (number, value) {
            case (1, .bytes(let text)): name = String(decoding: text, as: UTF8.self)
            case (2, .bytes(let field)): fieldBytes.append(field)
            case (3, .bytes(let nested)): nestedBytes.append(nested)
            case (4, .bytes(let enumeration)): enumBytes.append(enumeration)
            case (7, .bytes(let options)): isMapEntry = try mapEntryOption(options)
            default: break
            }
        }
        let fullName = scope + "." + name
        var fields: [Int: ProtobufSchema.Field] = [:]
        for bytes in fieldBytes {
            let field = try self.field(bytes, proto3: proto3)
            fields[field.number] = field
        }
        var nested: [String] = []
        for bytes in nestedBytes { nested.append(try message(bytes, scope: fullName, proto3: proto3, into: &file)) }
        for bytes in enumBytes { try enumeration(bytes, scope: fullName, into: &file) }
        file.messages.append(.init(fullName: fullName, fields: fields, isMapEntry: isMapEntry, nested: nested))
        return fullName
    }

    static func field(_ bytes: ArraySlice<UInt8>, proto3: Bool) throws(ProtobufWireReader.Failure) -> ProtobufSchema.Field {
        var reader = ProtobufWireReader(bytes)
        var name = "", number = 0, label = 1, type = 0, typeName = ""
        var packed: Bool?
        var inOneof = false, proto3Optional = false
        while let (field, value) = try reader.nextField() {
            switch (field, value) {
            case (1, .bytes(let text)): name = String(decoding: text, as: UTF8.self)
            case (3, .varint(let value)): number = Int(truncatingIfNeeded: value)
            case (4, .varint(let value)): label = Int(truncatingIfNeeded: value)
            case (5, .varint(let value)): type = Int(truncatingIfNeeded: value)
            case (6, .bytes(let text)): typeName = String(decoding: text, as: UTF8.self)
            case (8, .bytes(let options)): packed = try packedOption(options)
            case (9, .varint): inOneof = true
            case (17, .varint(let value)): proto3Optional = value != 0
            default: break
            }
        }
        let repeated = label == 3
        let scalar = type != 11 && type != 10
        return .init(name: name, number: number, type: type, repeated: repeated, packed: packed, typeName: typeName,
                     impliedZero: proto3 && !repeated && scalar && !inOneof && !proto3Optional)
    }

    static func enumeration(_ bytes: ArraySlice<UInt8>, scope: String, into file: inout File) throws(ProtobufWireReader.Failure) {
        var reader = ProtobufWireReader(bytes)
        var name = ""
        var values: [Int: String] = [:]
        while let (number, value) = try reader.nextField() {
            switch (number, value) {
            case (1, .bytes(let text)): name = String(decoding: text, as: UTF8.self)
            case (2, .bytes(let entry)):
                var entryReader = ProtobufWireReader(entry)
                var valueName = "", valueNumber = 0
                while let (field, item) = try entryReader.nextField() {
                    if case (1, .bytes(let text)) = (field, item) { valueName = String(decoding: text, as: UTF8.self) }
                    if case (2, .varint(let raw)) = (field, item) { valueNumber = Int(Int32(truncatingIfNeeded: raw)) }
                }
                if values[valueNumber] == nil { values[valueNumber] = valueName }  // the first alias names it
            default: break
            }
        }
        file.enums[scope + "." + name] = values
    }

    /// MessageOptions.map_entry (field 7).
    static func mapEntryOption(_ bytes: ArraySlice<UInt8>) throws(ProtobufWireReader.Failure) -> Bool {
        var reader = ProtobufWireReader(bytes)
        while let (number, value) = try reader.nextField() {
            if case (7, .varint(let flag)) = (number, value) { return flag != 0 }
        }
        return false
    }

    /// FieldOptions.packed (field 2), when set.
    static func packedOption(_ bytes: ArraySlice<UInt8>) throws(ProtobufWireReader.Failure) -> Bool? {
        var reader = ProtobufWireReader(bytes)
        while let (number, value) = try reader.nextField() {
            if case (2, .varint(let flag)) = (number, value) { return flag != 0 }
        }
        return nil
    }
}

/// Protobuf's wire format: tags, then varints, fixed widths or length-delimited fields.
struct ProtobufWireReader {
    enum Value {
        case varint(UInt64)
        case fixed64(UInt64)
        case fixed32(UInt32)
        case bytes(ArraySlice<UInt8>)
    }

    typealias Failure = BinaryDecodingError

    private(set) var cursor: ByteCursor

    init(_ bytes: ArraySlice<UInt8>) {
        self.cursor = ByteCursor(bytes)
    }

    /// The next field's number and value; nil at the end.
    mutating func nextField() throws(Failure) -> (Int, Value)? {
        guard !cursor.isAtEnd else { return nil }
        let tag = try cursor.varint()
        let number = Int(truncatingIfNeeded: tag >> 3)
        guard number > 0 else { throw Failure(message: "field number 0") }
        switch tag & 7 {
        case 0: return (number, .varint(try cursor.varint()))
        case 1: return (number, .fixed64(try cursor.littleEndian(UInt64.self)))
        case 2:
            let length = try cursor.varint()
            guard length <= UInt64(cursor.remaining) else { throw Failure(message: "a length of \(length) past the end") }
            return (number, .bytes(try cursor.take(Int(length))))
        case 5: return (number, .fixed32(try cursor.littleEndian(UInt32.self)))
        default: throw Failure(message: "wire type \(tag & 7) (groups are not supported)")
        }
    }
}

/// Decodes one message with a `ProtobufSchema`.
struct ProtobufDecoder {
    let schema: ProtobufSchema
    private var depth = 0

    init(schema: ProtobufSchema) {
        self.schema = schema
    }

    /// The message indexes after the framing's schema id, then the message; the framing
    /// writes the indexes as a zig-zag count and zig-zag values, a single 0 for `[0]`.
    static func decodeFramed(_ value: [UInt8], schema: ProtobufSchema) throws(ProtobufWireReader.Failure) -> JSONValue {
        var cursor = ByteCursor(value[5...])
        let count = try cursor.signedVarint()
        guard count >= 0, count <= 32 else { throw .init(message: "\(count) message indexes") }
        var indexes: [Int] = []
        for _ in 0..<count { indexes.append(Int(truncatingIfNeeded: try cursor.signedVarint())) }
        if indexes.isEmpty { indexes = [0] }
        guard let message = schema.message(at: indexes) else { throw .init(message: "no message at indexes \(indexes)") }
        var decoder = ProtobufDecoder(schema: schema)
        return try decoder.decode(cursor.bytes, as: message)
    }

    mutating func decode(_ bytes: ArraySlice<UInt8>, as message: ProtobufSchema.Message) throws(ProtobufWireReader.Failure) -> JSONValue {
        depth += 1
        defer { depth -= 1 }
        guard depth <= 64 else { throw .init(message: "nested deeper than 64") }
        var object: [String: JSONValue] = [:]
        var lists: [String: [JSONValue]] = [:]
        var reader = ProtobufWireReader(bytes)
        while let (number, value) = try reader.nextField() {
            guard let field = message.fields[number] else { continue }  // unknown fields are skipped
            if field.repeated {
                lists[field.name, default: []] += try repeatedValues(value, field)
            } else {
                object[field.name] = try single(value, field)
            }
        }
        for field in message.fields.values {
            if field.repeated {
                let elements = lists[field.name] ?? []
                object[field.name] = isMap(field) ? .object(Self.entries(elements)) : .array(elements)
            } else if object[field.name] == nil, field.impliedZero {
                object[field.name] = zero(field)
            }
        }
        return .object(object)
    }

    private func isMap(_ field: ProtobufSchema.Field) -> Bool {
        field.type == 11 && (schema.messages[field.typeName]?.isMapEntry ?? false)
    }

    private static func entries(_ elements: [JSONValue]) -> [String: JSONValue] {
        var object: [String: JSONValue] = [:]
        for element in elements {
            let key: String
            switch element["key"] {
            case .string(let text)?: key = text
            case .number(let number)?: key = JSONText.number(number)
            case .bool(let flag)?: key = flag ? "true" : "false"
            default: key = ""
            }
            object[key] = element["value"] ?? .null
        }
        return object
    }

    private mutating func repeatedValues(_ value: ProtobufWireReader.Value, _ field: ProtobufSchema.Field) throws(ProtobufWireReader.Failure) -> [JSONValue] {
        // Packed scalars: many values in one length-delimited field.
        if case .bytes(let packed) = value, ![9, 11, 12].contains(field.type) {
            var cursor = ByteCursor(packed)
            var values: [JSONValue] = []
            while !cursor.isAtEnd {
                let element: ProtobufWireReader.Value
                switch field.type {
                case 1, 6, 16: element = .fixed64(try cursor.littleEndian(UInt64.self))
                case 2, 7, 15: element = .fixed32(try cursor.littleEndian(UInt32.self))
                default: element = .varint(try cursor.varint())
                }
                values.append(try scalar(element, field))
            }
            return values
        }
        return [try single(value, field)]
    }

    private mutating func single(_ value: ProtobufWireReader.Value, _ field: ProtobufSchema.Field) throws(ProtobufWireReader.Failure) -> JSONValue {
        guard field.type == 11 else { return try scalar(value, field) }
        guard case .bytes(let bytes) = value else { throw .init(message: "field \(field.name) is not a message on the wire") }
        if let wellKnown = try Self.wellKnown(field.typeName, bytes) { return wellKnown }
        guard let message = schema.messages[field.typeName] else { throw .init(message: "no descriptor for \(field.typeName)") }
        return try decode(bytes, as: message)
    }

    private func scalar(_ value: ProtobufWireReader.Value, _ field: ProtobufSchema.Field) throws(ProtobufWireReader.Failure) -> JSONValue {
        switch (field.type, value) {
        case (1, .fixed64(let bits)): return .number(Double(bitPattern: bits))
        case (2, .fixed32(let bits)): return .number(Double(Float(bitPattern: bits)))
        case (3, .varint(let raw)): return .number(Double(Int64(bitPattern: raw)))
        case (18, .varint(let raw)): return .number(Double(ByteCursor.zigzag(raw)))
        case (4, .varint(let raw)), (13, .varint(let raw)): return .number(Double(raw))
        case (5, .varint(let raw)): return .number(Double(Int32(truncatingIfNeeded: raw)))
        case (17, .varint(let raw)): return .number(Double(Int32(truncatingIfNeeded: ByteCursor.zigzag(raw))))
        case (6, .fixed64(let raw)): return .number(Double(raw))
        case (16, .fixed64(let raw)): return .number(Double(Int64(bitPattern: raw)))
        case (7, .fixed32(let raw)): return .number(Double(raw))
        case (15, .fixed32(let raw)): return .number(Double(Int32(bitPattern: raw)))
        case (8, .varint(let raw)): return .bool(raw != 0)
        case (9, .bytes(let text)):
            guard let string = String(validating: text, as: UTF8.self) else { throw .init(message: "field \(field.name) is not UTF-8") }
            return .string(string)
        case (12, .bytes(let data)): return .string(Data(data).base64EncodedString())
        case (14, .varint(let raw)):
            let number = Int(Int32(truncatingIfNeeded: raw))
            return schema.enums[field.typeName]?[number].map(JSONValue.string) ?? .number(Double(number))
        default:
            throw .init(message: "field \(field.name) has a wire type its type \(field.type) does not use")
        }
    }

    private func zero(_ field: ProtobufSchema.Field) -> JSONValue {
        switch field.type {
        case 8: .bool(false)
        case 9, 12: .string("")
        case 14: schema.enums[field.typeName]?[0].map(JSONValue.string) ?? .number(0)
        default: .number(0)
        }
    }

    /// `google.protobuf.Timestamp` as epoch milliseconds, the wrappers as their value.
    private static func wellKnown(_ typeName: String, _ bytes: ArraySlice<UInt8>) throws(ProtobufWireReader.Failure) -> JSONValue? {
        guard typeName.hasPrefix(".google.protobuf.") else { return nil }
        var reader = ProtobufWireReader(bytes)
        var first: ProtobufWireReader.Value?
        var second: ProtobufWireReader.Value?
        while let (number, value) = try reader.nextField() {
            if number == 1 { first = value } else if number == 2 { second = value }
        }
        func integer(_ value: ProtobufWireReader.Value?) -> Int64 {
            if case .varint(let raw)? = value { return Int64(bitPattern: raw) }
            return 0
        }
        switch typeName {
        case ".google.protobuf.Timestamp":
            let seconds = integer(first), nanos = Int64(Int32(truncatingIfNeeded: integer(second)))
            return .number(Double(seconds * 1000 + nanos / 1_000_000))
        case ".google.protobuf.DoubleValue":
            if case .fixed64(let bits)? = first { return .number(Double(bitPattern: bits)) }
            return .number(0)
        case ".google.protobuf.FloatValue":
            if case .fixed32(let bits)? = first { return .number(Double(Float(bitPattern: bits))) }
            return .number(0)
        case ".google.protobuf.Int64Value", ".google.protobuf.Int32Value": return .number(Double(integer(first)))
        case ".google.protobuf.UInt64Value", ".google.protobuf.UInt32Value":
            if case .varint(let raw)? = first { return .number(Double(raw)) }
            return .number(0)
        case ".google.protobuf.BoolValue": return .bool(integer(first) != 0)
        case ".google.protobuf.StringValue":
            if case .bytes(let text)? = first { return .string(String(decoding: text, as: UTF8.self)) }
            return .string("")
        default:
            return nil
        }
    }
}

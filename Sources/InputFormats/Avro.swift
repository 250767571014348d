import Foundation
import JSON

/// An Avro schema (the writer's, from the registry) and the binary decoding of values written
/// with it into the same document a JSON record gives, so that mappings apply unchanged:
/// records are objects, unions their branch's value, enums their symbol, `timestamp-millis`
/// and `timestamp-micros` epoch milliseconds, bytes and fixed base64 text.
public struct AvroSchema: Sendable {
    indirect enum Node: Sendable {
        case null, boolean, int, long, float, double, bytes, string
        case record(name: String, fields: [(name: String, type: Node)])
        case enumeration(name: String, symbols: [String])
        case array(Node)
        case map(Node)
        case union([Node])
        case fixed(name: String, size: Int)
        /// A long or int carrying time; decoded as epoch milliseconds.
        case timestamp(unitsPerMillisecond: Int64, Node)
        /// A named type defined elsewhere in the schema (records may refer to themselves).
        case named(String)
    }

    public struct ParseError: Error, CustomStringConvertible {
        public let description: String
    }

    let root: Node
    let namedTypes: [String: Node]

    /// Parses the schema's JSON text.
    public init(parsing text: String) throws(ParseError) {
        let document: JSONValue
        do {
            document = try JSONParser.parse(text)
        } catch {
            throw ParseError(description: "the Avro schema is not JSON: \(error)")
        }
        var parser = Parser()
        self.root = try parser.node(document, namespace: nil)
        self.namedTypes = parser.named
    }

    // MARK: Parsing

    private struct Parser {
        var named: [String: Node] = [:]

        mutating func node(_ value: JSONValue, namespace: String?) throws(ParseError) -> Node {
            switch value {
            case .string(let name):
                return try primitiveOrNamed(name, namespace: namespace)
            case .array(let branches):
                return .union(try branches.map { branch throws(ParseError) in try node(branch, namespace: namespace) })
            case .object(let fields):
                return try complex(fields, namespace: namespace)
            default:
                throw ParseError(description: "unexpected \(value.typeName) in the Avro schema")
            }
        }

        func primitiveOrNamed(_ name: String, namespace: String?) throws(ParseError) -> Node {
            switch name {
            case "null": .null
            case "boolean": .boolean
            case "int": .int
            case "long": .long
            case "float": .float
            case "double": .double
            case "bytes": .bytes
            case "string": .string
            default: .named(Self.fullName(name, namespace: namespace))
            }
        }

        mutating func complex(_ fields: [String: JSONValue], namespace: String?) throws(ParseError) -> Node {
            guard case .string(let type) = fields["type"] ?? .null else {
                if let nested = fields["type"] { return try node(nested, namespace: namespace) }
                throw ParseError(description: "an Avro type without \"type\"")
            }
            let logical = fields["logicalType"]?.stringValue
            switch type {
            case "record", "error":
                let (name, space) = try self.name(fields, namespace: namespace)
                // Registered before its fields, which may refer to it.
                named[name] = .named(name)
                guard case .array(let list) = fields["fields"] ?? .null else { throw ParseError(description: "record \(name) has no fields") }
                let members = try list.map { field throws(ParseError) -> (name: String, type: Node) in
                    guard let fieldName = field["name"]?.stringValue, let fieldType = field["type"] else {
                        throw ParseError(description: "a field of record \(name) has no name or type")
                    }
                    return (fieldName, try node(fieldType, namespace: space))
                }
                let record = Node.record(name: name, fields: members)
                named[name] = record
                return record
            case "enum":
                let (name, _) = try self.name(fields, namespace: namespace)
                guard case .array(let symbols) = fields["symbols"] ?? .null else { throw ParseError(description: "enum \(name) has no symbols") }
                let node = Node.enumeration(name: name, symbols: symbols.compactMap(\.stringValue))
                named[name] = node
                return node
            case "array":
                guard let items = fields["items"] else { throw ParseError(description: "an array without items") }
                return .array(try node(items, namespace: namespace))
            case "map":
                guard let values = fields["values"] else { throw ParseError(description: "a map without values") }
                return .map(try node(values, namespace: namespace))
            case "fixed":
                let (name, _) = try self.name(fields, namespace: namespace)
                guard let size = fields["size"]?.numberValue, size >= 0 else { throw ParseError(description: "fixed \(name) has no size") }
                let node = Node.fixed(name: name, size: Int(size))
                named[name] = node
                return node
            default:
                let base = try primitiveOrNamed(type, namespace: namespace)
                switch (logical, base) {
                case ("timestamp-millis", .long), ("local-timestamp-millis", .long): return .timestamp(unitsPerMillisecond: 1, base)
                case ("timestamp-micros", .long), ("local-timestamp-micros", .long): return .timestamp(unitsPerMillisecond: 1000, base)
                case ("timestamp-nanos", .long), ("local-timestamp-nanos", .long): return .timestamp(unitsPerMillisecond: 1_000_000, base)
                default: return base  // other logical types decode as their underlying type
                }
            }
        }

        func name(_ fields: [String: JSONValue], namespace: String?) throws(ParseError) -> (String, String?) {
            guard let name = fields["name"]?.stringValue else { throw ParseError(description: "a named Avro type without a name") }
            let space = fields["namespace"]?.stringValue ?? namespace
            let full = Self.fullName(name, namespace: space)
            let enclosing = full.contains(".") ? String(full[..<full.lastIndex(of: ".")!]) : nil
            return (full, enclosing)
        }

        static func fullName(_ name: String, namespace: String?) -> String {
            name.contains(".") || namespace == nil || namespace!.isEmpty ? name : "\(namespace!).\(name)"
        }
    }
}

/// Reads Avro's binary encoding (Avro 1.11 specification) with a writer schema.
struct AvroReader {
    typealias Failure = BinaryDecodingError

    private var cursor: ByteCursor
    private let schema: AvroSchema
    private var depth = 0

    init(_ bytes: ArraySlice<UInt8>, schema: AvroSchema) {
        self.cursor = ByteCursor(bytes)
        self.schema = schema
    }

    /// The whole value; bytes left over mean the schema does not fit.
    static func decode(_ bytes: ArraySlice<UInt8>, schema: AvroSchema) throws(Failure) -> JSONValue {
        var reader = AvroReader(bytes, schema: schema)
        let value = try reader.read(schema.root)
        guard reader.cursor.isAtEnd else { throw Failure(message: "\(reader.cursor.remaining) bytes left after the value") }
        return value
    }

    private mutating func read(_ node: AvroSchema.Node) throws(Failure) -> JSONValue {
        depth += 1
        defer { depth -= 1 }
        guard depth <= 64 else { throw Failure(message: "nested deeper than 64") }
        switch node {
        case .null: return .null
        case .boolean: return .bool(try cursor.byte() != 0)
        case .int, .long: return .number(Double(try long()))
        case .float: return .number(Double(Float(bitPattern: try cursor.littleEndian(UInt32.self))))
        case .double: return .number(Double(bitPattern: try cursor.littleEndian(UInt64.self)))
        case .string:
            let raw = try block()
            guard let text = String(validating: raw, as: UTF8.self) else { throw Failure(message: "a string that is not UTF-8") }
            return .string(text)
        case .bytes: return .string(Data(try block()).base64EncodedString())
        case .fixed(_, let size): return .string(Data(try cursor.take(size)).base64EncodedString())
        case .record(_, let fields):
            var object: [String: JSONValue] = [:]
            for field in fields { object[field.name] = try read(field.type) }
            return .object(object)
        case .enumeration(let name, let symbols):
            let index = try long()
            guard symbols.indices.contains(Int(index)) else { throw Failure(message: "enum \(name) has no symbol \(index)") }
            return .string(symbols[Int(index)])
        case .array(let items):
            var elements: [JSONValue] = []
            try blocks { reader throws(Failure) in elements.append(try reader.read(items)) }
            return .array(elements)
        case .map(let values):
            var object: [String: JSONValue] = [:]
            try blocks { reader throws(Failure) in
                let key = try reader.read(.string)
                object[key.stringValue!] = try reader.read(values)
            }
            return .object(object)
        case .union(let branches):
            let index = try long()
            guard branches.indices.contains(Int(index)) else { throw Failure(message: "a union has no branch \(index)") }
            return try read(branches[Int(index)])
        case .timestamp(let unitsPerMillisecond, _):
            let value = try long()
            return .number(Double(value >= 0 ? value / unitsPerMillisecond : (value - unitsPerMillisecond + 1) / unitsPerMillisecond))
        case .named(let name):
            guard let resolved = schema.namedTypes[name], !Self.isReference(resolved) else {
                throw Failure(message: "the schema names an undefined type \(name)")
            }
            return try read(resolved)
        }
    }

    private static func isReference(_ node: AvroSchema.Node) -> Bool {
        if case .named = node { true } else { false }
    }

    /// Array and map blocks: a count (negative: followed by the block's size), until 0.
    private mutating func blocks(_ item: (inout AvroReader) throws(Failure) -> Void) throws(Failure) {
        while true {
            var count = try long()
            if count == 0 { return }
            if count < 0 {
                guard count != .min else { throw Failure(message: "a block count out of range") }
                count = -count
                _ = try long()
            }
            guard count <= Int64(cursor.remaining) else { throw Failure(message: "a block of \(count) items in \(cursor.remaining) bytes") }
            for _ in 0..<count { try item(&self) }
        }
    }

    private mutating func long() throws(Failure) -> Int64 {
        try cursor.signedVarint()
    }

    private mutating func block() throws(Failure) -> ArraySlice<UInt8> {
        let length = try long()
        guard length >= 0, length <= Int64(cursor.remaining) else { throw Failure(message: "a length of \(length) past the end") }
        return try cursor.take(Int(length))
    }
}

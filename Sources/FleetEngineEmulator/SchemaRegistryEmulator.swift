import Foundation
import HTTPServing
import InputFormats
import JSON
import Synchronization

/// A Confluent Schema Registry stand-in with the REST endpoints serializers and the relay
/// use: register and look up a schema under a subject, fetch a schema by id or by subject
/// and version, list subjects, a subject's versions and the types. Ids are global and stable
/// for identical schemas. It can require basic credentials and be taken down, for outage tests.
///
/// It answers as Confluent's registry does: `schemaType` only for types other than Avro,
/// `references` only when there are some, and a Protobuf schema registered in its serialized
/// form (a base64 `FileDescriptorProto`, as Confluent's serializers send it) comes back as
/// `.proto` text unless the client asks for `format=serialized`.
public final class SchemaRegistryEmulator: EmulatedService {
    struct Schema: Equatable {
        /// As answered by default: Avro and JSON Schema as registered, Protobuf as `.proto` text.
        let text: String
        let type: String
        let references: JSONValue
        /// Protobuf: the base64 `FileDescriptorProto`, answered for `format=serialized`.
        let serialized: String?

        init(registered: String, type: String, references: JSONValue) {
            self.type = type
            self.references = references
            if type == "PROTOBUF", let bytes = Data(base64Encoded: registered),
               let schema = try? ProtobufSchema(file: Array(bytes), dependencies: []) {
                text = ProtoText.render(schema)
                serialized = registered
            } else {
                text = registered
                serialized = nil
            }
        }

        func text(serializedWanted: Bool) -> String { serializedWanted ? serialized ?? text : text }

        /// Matches a schema as a client sends it, in either form.
        func matches(_ registered: String, type: String) -> Bool {
            self.type == type && (text == registered || serialized == registered)
        }

        /// The fields Confluent answers for a schema.
        func fields(serializedWanted: Bool) -> [String: JSONValue] {
            var fields: [String: JSONValue] = ["schema": .string(text(serializedWanted: serializedWanted))]
            if type != "AVRO" { fields["schemaType"] = .string(type) }
            if case .array(let list) = references, !list.isEmpty { fields["references"] = references }
            return fields
        }
    }

    struct State {
        var schemas: [Schema] = []
        /// Schema ids (1-based) per subject, in version order.
        var subjects: [String: [Int]] = [:]
        var available = true
        var lookupsById = 0
        var refusedWhileDown = 0
    }

    private let state = Mutex(State())
    /// `user:password` the registry requires, or nil for none.
    private let requiredCredentials: String?

    public init(requiredCredentials: String? = nil) {
        self.requiredCredentials = requiredCredentials
    }

    /// While unavailable every registry request is answered 503.
    public func setAvailable(_ available: Bool) {
        state.withLock { $0.available = available }
    }

    /// `GET /schemas/ids/{id}` requests answered, and requests refused while down.
    public var statistics: (lookupsById: Int, refusedWhileDown: Int) {
        state.withLock { ($0.lookupsById, $0.refusedWhileDown) }
    }

    /// The ids of the Protobuf schemas registered, in order.
    public var protobufIds: [Int] {
        state.withLock { registry in registry.schemas.indices.filter { registry.schemas[$0].type == "PROTOBUF" }.map { $0 + 1 } }
    }

    /// The text of schema `id`, as registered.
    public func schemaText(id: Int) -> String? {
        state.withLock { $0.schemas.indices.contains(id - 1) ? $0.schemas[id - 1].text(serializedWanted: true) : nil }
    }

    /// Registers a schema directly (tests, the simulator): its id.
    @discardableResult
    public func register(subject: String, schema: String, type: String = "AVRO", references: JSONValue = .array([])) -> Int {
        state.withLock { state in
            let entry = Schema(registered: schema, type: type, references: references)
            let id = (state.schemas.firstIndex(of: entry) ?? { state.schemas.append(entry); return state.schemas.count - 1 }()) + 1
            if !(state.subjects[subject] ?? []).contains(id) { state.subjects[subject, default: []].append(id) }
            return id
        }
    }

    public func respond(to request: HTTPRequest) async -> HTTPResponse? {
        let segments = request.path.split(separator: "/").map { String($0).removingPercentEncoding ?? String($0) }
        guard let first = segments.first, first == "subjects" || first == "schemas" else { return nil }
        if let requiredCredentials, request.header("Authorization") != "Basic " + Self.base64(requiredCredentials) {
            return Self.error(401, 40101, "Unauthorized")
        }
        let available = state.withLock { state in
            if !state.available { state.refusedWhileDown += 1 }
            return state.available
        }
        guard available else { return Self.error(503, 50301, "Schema Registry is unavailable") }
        let serialized = request.query["format"] == "serialized"
        switch (request.method, segments.count) {
        case ("GET", 1) where first == "subjects":
            return .json(200, JSONValue.array(state.withLock { $0.subjects.keys.sorted().map(JSONValue.string) }).serialized())
        case ("GET", 2) where first == "schemas" && segments[1] == "types":
            return .json(200, #"["AVRO","PROTOBUF","JSON"]"#)
        case ("GET", 3) where first == "schemas" && segments[1] == "ids":
            return schemaById(segments[2], serialized: serialized)
        case ("GET", 3) where first == "subjects" && segments[2] == "versions":
            guard let ids = state.withLock({ $0.subjects[segments[1]] }) else {
                return Self.error(404, 40401, "Subject '\(segments[1])' not found.")
            }
            return .json(200, JSONValue.array(ids.indices.map { .number(Double($0 + 1)) }).serialized())
        case ("POST", 3) where first == "subjects" && segments[2] == "versions":
            return registerRequest(subject: segments[1], body: request.body)
        case ("POST", 2) where first == "subjects":
            return lookup(subject: segments[1], body: request.body)
        case ("GET", 4) where first == "subjects" && segments[2] == "versions":
            return version(subject: segments[1], segments[3], serialized: serialized)
        default:
            return Self.error(404, 404, "No such Schema Registry resource: \(request.method) \(request.path)")
        }
    }

    private func schemaById(_ text: String, serialized: Bool) -> HTTPResponse {
        guard let id = Int(text) else { return Self.error(404, 40403, "Schema \(text) not found") }
        let schema: Schema? = state.withLock { state in
            state.lookupsById += 1
            return state.schemas.indices.contains(id - 1) ? state.schemas[id - 1] : nil
        }
        guard let schema else { return Self.error(404, 40403, "Schema \(id) not found") }
        return .json(200, JSONValue.object(schema.fields(serializedWanted: serialized)).serialized())
    }

    private func registerRequest(subject: String, body: [UInt8]) -> HTTPResponse {
        guard let request = try? JSONParser.parse(body), let text = request["schema"]?.stringValue else {
            return Self.error(422, 42201, "Invalid schema")
        }
        let id = register(subject: subject, schema: text, type: request["schemaType"]?.stringValue ?? "AVRO",
                          references: request["references"] ?? .array([]))
        return .json(200, JSONValue.object(["id": .number(Double(id))]).serialized())
    }

    private func lookup(subject: String, body: [UInt8]) -> HTTPResponse {
        guard let request = try? JSONParser.parse(body), let text = request["schema"]?.stringValue else {
            return Self.error(422, 42201, "Invalid schema")
        }
        let type = request["schemaType"]?.stringValue ?? "AVRO"
        let found: (id: Int, version: Int)? = state.withLock { state in
            guard let ids = state.subjects[subject] else { return nil }
            for (index, id) in ids.enumerated() where state.schemas[id - 1].matches(text, type: type) {
                return (id, index + 1)
            }
            return nil
        }
        guard let found else { return Self.error(404, 40403, "Schema not found") }
        let schema = state.withLock { $0.schemas[found.id - 1] }
        return .json(200, JSONValue.object(schema.fields(serializedWanted: false).merging([
            "subject": .string(subject), "id": .number(Double(found.id)), "version": .number(Double(found.version)),
        ]) { $1 }).serialized())
    }

    private func version(subject: String, _ version: String, serialized: Bool) -> HTTPResponse {
        let entry: (id: Int, version: Int, schema: Schema)? = state.withLock { state in
            guard let ids = state.subjects[subject], !ids.isEmpty else { return nil }
            let number = version == "latest" ? ids.count : Int(version) ?? 0
            guard (1...ids.count).contains(number) else { return nil }
            return (ids[number - 1], number, state.schemas[ids[number - 1] - 1])
        }
        guard let entry else { return Self.error(404, 40402, "Version \(version) of subject \(subject) not found") }
        return .json(200, JSONValue.object(entry.schema.fields(serializedWanted: serialized).merging([
            "subject": .string(subject), "id": .number(Double(entry.id)), "version": .number(Double(entry.version)),
        ]) { $1 }).serialized())
    }

    private static func error(_ status: Int, _ code: Int, _ message: String) -> HTTPResponse {
        .json(status, JSONValue.object(["error_code": .number(Double(code)), "message": .string(message)]).serialized())
    }

    private static func base64(_ text: String) -> String {
        Data(text.utf8).base64EncodedString()
    }
}

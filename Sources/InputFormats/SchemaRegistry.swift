import AsyncHTTPClient
import Egress
import Foundation
import JSON
import NIOCore
import NIOHTTP1

/// A schema as the registry holds it, ready to decode values written with it.
public enum RegisteredSchema: Sendable {
    case avro(AvroSchema)
    case protobuf(ProtobufSchema)
    /// JSON Schema: the value is JSON text behind the framing.
    case json
    /// A schema the relay cannot decode with (its type, or why); its records are dead-lettered.
    case unusable(String)
}

/// What the registry said about a schema id.
public enum SchemaLookup: Sendable {
    case found(RegisteredSchema)
    /// The registry does not know the id (HTTP 404): its records are dead-lettered.
    case unknown
}

/// The registry could not be asked (down, slow, 5xx, 401): records wait and are retried.
public struct SchemaRegistryUnavailable: Error, CustomStringConvertible, Sendable {
    public let description: String
}

/// Where schemas come from; the registry client, or a table in tests.
public protocol SchemaSource: Sendable {
    func schema(id: Int32) async throws(SchemaRegistryUnavailable) -> SchemaLookup
}

/// Confluent Schema Registry's REST API (`GET /schemas/ids/{id}`), through the relay's egress
/// (trust anchors, proxy). Credentials go in an Authorization header and never into errors.
public final class SchemaRegistryClient: SchemaSource {
    public let baseURL: String
    private let authorization: String?
    private let egress: Egress
    private let timeout: TimeAmount

    /// - Parameter credentials: `user:password` (HTTP basic), or nil.
    public init(baseURL: String, credentials: String?, egress: Egress, timeout: Duration = .seconds(10)) {
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.authorization = credentials.map { "Basic " + Data($0.utf8).base64EncodedString() }
        self.egress = egress
        self.timeout = .seconds(timeout.components.seconds)
    }

    /// `GET /schemas/ids/{id}` in the serialized format (Protobuf: base64 `FileDescriptorProto`s),
    /// and for Protobuf the files it references, by subject and version.
    public func schema(id: Int32) async throws(SchemaRegistryUnavailable) -> SchemaLookup {
        guard let document = try await get("schemas/ids/\(id)?format=serialized", what: "schema \(id)") else { return .unknown }
        guard let text = document["schema"]?.stringValue else {
            throw SchemaRegistryUnavailable(description: "the Schema Registry at \(baseURL) sent no schema for id \(id)")
        }
        switch document["schemaType"]?.stringValue ?? "AVRO" {
        case "AVRO":
            do {
                return .found(.avro(try AvroSchema(parsing: text)))
            } catch {
                return .found(.unusable("its Avro schema cannot be read: \(error)"))
            }
        case "JSON":
            return .found(.json)
        case "PROTOBUF":
            return .found(try await protobuf(text, references: document["references"]))
        case let other:
            return .found(.unusable("schemas of type \(other) are not decoded"))
        }
    }

    private func protobuf(_ text: String, references: JSONValue?) async throws(SchemaRegistryUnavailable) -> RegisteredSchema {
        guard let file = Data(base64Encoded: text) else {
            return .unusable("its Protobuf schema is not in the serialized format (base64 FileDescriptorProto)")
        }
        var dependencies: [[UInt8]] = []
        var pending = references?.arrayValue ?? []
        var seen: Set<String> = []
        while let reference = pending.popLast() {
            guard let subject = reference["subject"]?.stringValue, let version = reference["version"]?.numberValue else { continue }
            guard seen.insert("\(subject)@\(version)").inserted else { continue }
            let path = "subjects/\(subject.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? subject)/versions/\(Int(version))?format=serialized"
            guard let document = try await get(path, what: "reference \(subject) version \(Int(version))") else {
                return .unusable("its reference \(subject) version \(Int(version)) is missing from the registry")
            }
            guard let text = document["schema"]?.stringValue, let bytes = Data(base64Encoded: text) else {
                return .unusable("its reference \(subject) is not in the serialized format")
            }
            dependencies.append(Array(bytes))
            pending += document["references"]?.arrayValue ?? []
        }
        do {
            return .protobuf(try ProtobufSchema(file: Array(file), dependencies: dependencies))
        } catch {
            return .unusable("its Protobuf descriptors cannot be read: \(error)")
        }
    }

    /// Registers a schema under `subject` (`POST /subjects/{subject}/versions`) and returns its
    /// id: how the simulator and the bench write framed records.
    public func register(subject: String, schema: String, type: String) async throws(SchemaRegistryUnavailable) -> Int32 {
        let body = JSONValue.object(["schema": .string(schema), "schemaType": .string(type)]).serialized()
        let path = "subjects/\(subject.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? subject)/versions"
        guard let answer = try await send(path, what: "registering \(subject)", method: .POST, body: body),
              let id = answer["id"]?.numberValue else {
            throw SchemaRegistryUnavailable(description: "the Schema Registry at \(baseURL) did not register \(subject)")
        }
        return Int32(id)
    }

    /// The answer's JSON, nil for 404; anything else but 200 is the registry being unavailable.
    private func get(_ path: String, what: String) async throws(SchemaRegistryUnavailable) -> JSONValue? {
        try await send(path, what: what, method: .GET, body: nil)
    }

    private func send(_ path: String, what: String, method: HTTPMethod, body: String?) async throws(SchemaRegistryUnavailable) -> JSONValue? {
        let url = "\(baseURL)/\(path)"
        var request = HTTPClientRequest(url: url)
        request.method = method
        if let body {
            request.headers.add(name: "Content-Type", value: "application/vnd.schemaregistry.v1+json")
            request.body = .bytes(ByteBuffer(string: body))
        }
        request.headers.add(name: "Accept", value: "application/vnd.schemaregistry.v1+json, application/json")
        if let authorization { request.headers.add(name: "Authorization", value: authorization) }
        let status: Int
        let body: ByteBuffer
        do {
            let response = try await egress.sharedHTTPClient(for: url).execute(request, timeout: timeout)
            status = Int(response.status.code)
            body = try await response.body.collect(upTo: 4 << 20)
        } catch {
            throw SchemaRegistryUnavailable(description: "cannot reach the Schema Registry at \(baseURL): \(TransportFailure.describe(error).message)")
        }
        if status == 404 { return nil }
        guard status == 200, let document = try? JSONParser.parse(Array(buffer: body)) else {
            throw SchemaRegistryUnavailable(description: "the Schema Registry at \(baseURL) answered HTTP \(status) for \(what)")
        }
        return document
    }
}

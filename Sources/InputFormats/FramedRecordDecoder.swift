import FleetAuth
import FleetModel
import JSON
import Synchronization

/// Values framed for the Confluent Schema Registry (magic byte 0, the schema id as a 4-byte
/// big-endian number, then the encoded value) decoded with their writer's schema, then
/// mapped like JSON records. Schemas are fetched once per id, before a chunk is decoded:
/// while the registry cannot be reached the chunk waits and is retried, and nothing is
/// dead-lettered for it; an id the registry does not know, or a value its schema cannot
/// decode, is dead-lettered with its own reason.
public final class FramedRecordDecoder: RecordDecoder {
    public let mapping: InputMapping
    private let defaultKind: VehicleKind
    private let source: any SchemaSource
    private let nowMilliseconds: @Sendable () -> Int64
    private let schemas = Mutex<[Int32: SchemaLookup]>([:])
    private let retryDelay: @Sendable (Int) -> Duration

    /// - Parameter retryDelay: the wait before asking the registry again after `attempt` failures.
    public init(mapping: InputMapping, source: any SchemaSource, defaultKind: VehicleKind = .vehicle,
                nowMilliseconds: @escaping @Sendable () -> Int64 = { WallClock.coarseNowMilliseconds() },
                retryDelay: @escaping @Sendable (Int) -> Duration = FramedRecordDecoder.backoff) {
        self.mapping = mapping
        self.source = source
        self.defaultKind = defaultKind
        self.nowMilliseconds = nowMilliseconds
        self.retryDelay = retryDelay
    }

    /// 0.5 s doubling up to 30 s.
    public static let backoff: @Sendable (Int) -> Duration = { attempt in .milliseconds(min(30_000, 500 << min(attempt, 6))) }

    public var preparesRecords: Bool { true }

    /// Fetches every schema the records name and the cache lacks (see `RecordDecoder.prepare`).
    public func prepare(_ records: [InputRecord], maximumAttempts: Int?,
                        unavailable: (SchemaRegistryUnavailable) -> Void) async throws {
        let missing = Set(records.compactMap { Self.schemaId($0.value) }).subtracting(schemas.withLock { Set($0.keys) })
        for id in missing.sorted() {
            var attempt = 0
            while true {
                try Task.checkCancellation()
                do {
                    let lookup = try await source.schema(id: id)
                    schemas.withLock { $0[id] = lookup }
                    break
                } catch {
                    attempt += 1
                    if let maximumAttempts, attempt >= maximumAttempts { throw error }
                    unavailable(error)
                    try await Task.sleep(for: retryDelay(attempt - 1))
                }
            }
        }
    }

    public func decode(_ record: InputRecord) -> DecodeOutcome {
        if let outcome = mapping.precheck(record, framing: 5) { return outcome }
        guard let id = Self.schemaId(record.value) else {
            return .rejected(Rejection(reason: .undecodable, detail: "The value has no Schema Registry framing (magic byte 0, then a 4-byte schema id)."))
        }
        guard let lookup = schemas.withLock({ $0[id] }) else {
            // prepare() ran for every chunk before it is decoded; reaching here is a bug.
            preconditionFailure("schema \(id) was not fetched before decoding")
        }
        let document: JSONValue
        switch lookup {
        case .unknown:
            return .rejected(Rejection(reason: .unknownSchema, detail: "The Schema Registry does not know schema id \(id)."))
        case .found(.unusable(let why)):
            return .rejected(Rejection(reason: .undecodable, detail: "Schema \(id) cannot be used: \(why)."))
        case .found(.avro(let schema)):
            do {
                document = try AvroReader.decode(record.value[5...], schema: schema)
            } catch {
                return .rejected(Rejection(reason: .undecodable, detail: "The value does not fit Avro schema \(id): \(error.message)."))
            }
        case .found(.protobuf(let schema)):
            do {
                document = try ProtobufDecoder.decodeFramed(record.value, schema: schema)
            } catch {
                return .rejected(Rejection(reason: .undecodable, detail: "The value does not fit Protobuf schema \(id): \(error.message)."))
            }
        case .found(.json):
            do {
                document = try JSONParser.parse(record.value[5...])
            } catch {
                return .rejected(Rejection(reason: .notJSON, detail: "The value of JSON Schema \(id) is not JSON: \(error.message) at byte \(error.offset + 5)."))
            }
        }
        return MappedJSONDecoder.outcome { () throws(Rejection) in
            try mapping.apply(to: document, record: record, defaultKind: defaultKind, nowMilliseconds: nowMilliseconds())
        }
    }

    /// The schema id of a framed value, nil without the framing.
    static func schemaId(_ value: [UInt8]) -> Int32? {
        guard value.count >= 5, value[0] == 0 else { return nil }
        return Int32(bitPattern: UInt32(value[1]) << 24 | UInt32(value[2]) << 16 | UInt32(value[3]) << 8 | UInt32(value[4]))
    }
}

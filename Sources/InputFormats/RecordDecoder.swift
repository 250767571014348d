import FleetAuth
import FleetEngine
import FleetModel
import JSON

/// One consumed record as the decoders see it.
public struct InputRecord: Sendable {
    public struct Header: Sendable, Equatable {
        public let name: String
        public let value: [UInt8]

        public init(name: String, value: [UInt8]) {
            self.name = name
            self.value = value
        }
    }

    public var key: [UInt8]?
    /// Empty for a record without a value (a tombstone).
    public var value: [UInt8]
    public var headers: [Header]
    public var timestampMilliseconds: Int64?

    public init(key: [UInt8]?, value: [UInt8], headers: [Header] = [], timestampMilliseconds: Int64? = nil) {
        self.key = key
        self.value = value
        self.headers = headers
        self.timestampMilliseconds = timestampMilliseconds
    }
}

/// What became of a record.
public enum DecodeOutcome: Sendable, Equatable {
    case update(LocationUpdate)
    case rejected(Rejection)
    /// Left out by the mapping's skip rule (its text): committed and counted, not sent.
    case skipped(String)
}

/// Turns records into events. Pure apart from the clock it is given; safe to share.
public protocol RecordDecoder: Sendable {
    /// Whether `prepare` has anything to do: records are gathered for it only then, so a decoder
    /// that implements `prepare` says true here (the default is false).
    var preparesRecords: Bool { get }

    /// Fetches what decoding the records needs from elsewhere (registry schemas), before
    /// `decode` runs on them; waits out an outage, asking again with backoff, until it has it
    /// or `maximumAttempts` failed (then throws the last failure). `unavailable` hears of
    /// each failure. Throws `CancellationError` when cancelled, leaving the records undecoded.
    func prepare(_ records: [InputRecord], maximumAttempts: Int?,
                 unavailable: (SchemaRegistryUnavailable) -> Void) async throws

    func decode(_ record: InputRecord) -> DecodeOutcome
}

extension RecordDecoder {
    public var preparesRecords: Bool { false }

    /// Decoders that need nothing from elsewhere are always prepared.
    public func prepare(_ records: [InputRecord], maximumAttempts: Int?,
                        unavailable: (SchemaRegistryUnavailable) -> Void) async throws {}

    public func prepare(_ records: [InputRecord], unavailable: (SchemaRegistryUnavailable) -> Void) async throws {
        try await prepare(records, maximumAttempts: nil, unavailable: unavailable)
    }
}

extension LocationEventDecoder: RecordDecoder {
    public func decode(_ record: InputRecord) -> DecodeOutcome {
        switch decode(key: record.key, value: record.value) {
        case .success(let update): .update(update)
        case .failure(let rejection): .rejected(rejection)
        }
    }
}

/// JSON values through a mapping.
public struct MappedJSONDecoder: RecordDecoder {
    public let mapping: InputMapping
    public let defaultKind: VehicleKind
    private let nowMilliseconds: @Sendable () -> Int64

    public init(mapping: InputMapping, defaultKind: VehicleKind = .vehicle,
                nowMilliseconds: @escaping @Sendable () -> Int64 = { WallClock.coarseNowMilliseconds() }) {
        self.mapping = mapping
        self.defaultKind = defaultKind
        self.nowMilliseconds = nowMilliseconds
    }

    public func decode(_ record: InputRecord) -> DecodeOutcome {
        if let outcome = mapping.precheck(record) { return outcome }
        let document: JSONValue
        do {
            document = try JSONParser.parse(record.value)
        } catch {
            return .rejected(Rejection(reason: .notJSON, detail: "The value is not JSON: \(error.message) at byte \(error.offset)."))
        }
        return Self.outcome { () throws(Rejection) in
            try mapping.apply(to: document, record: record, defaultKind: defaultKind, nowMilliseconds: nowMilliseconds())
        }
    }

    static func outcome(_ apply: () throws(Rejection) -> InputMapping.Applied) -> DecodeOutcome {
        do {
            switch try apply() {
            case .update(let update): return .update(update)
            case .skipped(let rule): return .skipped(rule)
            }
        } catch {
            return .rejected(error)
        }
    }
}

extension InputMapping {
    /// What is decided before a value is decoded: a record without a value that the mapping
    /// skips, or a value over the size limit (not counting `framing` bytes in front of it).
    func precheck(_ record: InputRecord, framing: Int = 0) -> DecodeOutcome? {
        if record.value.isEmpty, skipsEmptyValues { return .skipped(SkipRule.emptyValue.description) }
        let size = record.value.count - framing
        guard size <= LocationEventDecoder.maximumValueBytes else {
            return .rejected(Rejection(reason: .tooLarge, detail: "The value is \(size) bytes; the limit is \(LocationEventDecoder.maximumValueBytes)."))
        }
        return nil
    }
}

public enum RecordDecoders {
    /// The decoder for a topic: framed values through the Schema Registry when there is one,
    /// else JSON through the mapping, else the native event's own decoder.
    public static func forTopic(mapping: InputMapping?, schemaSource: (any SchemaSource)?,
                                defaultKind: VehicleKind) -> any RecordDecoder {
        if let schemaSource {
            return FramedRecordDecoder(mapping: mapping ?? BuiltInFormat.native.mapping, source: schemaSource, defaultKind: defaultKind)
        }
        guard let mapping else { return LocationEventDecoder(defaultKind: defaultKind) }
        return MappedJSONDecoder(mapping: mapping, defaultKind: defaultKind)
    }
}

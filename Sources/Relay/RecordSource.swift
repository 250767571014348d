import FleetModel
import InputFormats
import Kafka

/// Where a fix came from: enough to finish its offset and to dead-letter it unchanged.
public struct RecordSource: Sendable {
    public let topicPartition: TopicPartition
    /// The record's key is the vehicle id of its fix, which holds it already: a fix waits in
    /// memory with its record (50,000 of them by default), so the key is not stored twice.
    /// `key(vehicleId:)` gives it back.
    let keyIsVehicleId: Bool
    public let offset: Int64
    public let generation: UInt64
    private let storedKey: [UInt8]?
    public let value: [UInt8]

    public init(_ record: consuming KafkaRecord) {
        self.init(RecordSite(record), key: record.key, value: record.value)
    }

    /// The source of a record at `site`, taking its key and value from what the decoder read.
    init(_ site: RecordSite, _ input: consuming InputRecord) {
        self.init(site, key: input.key, value: input.value)
    }

    private init(_ site: RecordSite, key: [UInt8]?, value: [UInt8]) {
        self.topicPartition = site.topicPartition
        self.keyIsVehicleId = false
        self.offset = site.offset
        self.generation = site.generation
        self.storedKey = key
        self.value = value
    }

    private init(keyAsVehicleIdOf source: RecordSource) {
        self.topicPartition = source.topicPartition
        self.keyIsVehicleId = true
        self.offset = source.offset
        self.generation = source.generation
        self.storedKey = nil
        self.value = source.value
    }

    /// The record's key. `vehicleId` is its fix's: nil only for a record that became none (a
    /// bad or skipped one), whose key is always stored.
    public func key(vehicleId: String?) -> [UInt8]? {
        guard keyIsVehicleId else { return storedKey }
        assert(vehicleId != nil, "a key stored as its fix's vehicle id needs that id back")
        return vehicleId.map { Array($0.utf8) }
    }

    /// The same source, storing no key when its key is `vehicleId`'s bytes.
    func storingKey(asVehicleId vehicleId: String) -> RecordSource {
        guard !keyIsVehicleId, let storedKey, storedKey.isUTF8(of: vehicleId) else { return self }
        return RecordSource(keyAsVehicleIdOf: self)
    }

    /// `topic/partition/offset`, the dead-letter `fleet-relay-source` header.
    public var description: String { "\(topicPartition.topic)/\(topicPartition.partition)/\(offset)" }
}

/// Where a record was read: its partition, offset and assignment generation.
struct RecordSite {
    let topicPartition: TopicPartition
    let offset: Int64
    let generation: UInt64

    init(_ record: borrowing KafkaRecord) {
        topicPartition = record.topicPartition
        offset = record.offset
        generation = record.assignmentGeneration
    }
}

/// A decoded fix on its way to Fleet Engine, with its origin.
public struct PendingFix: Sendable {
    public let update: LocationUpdate
    public let source: RecordSource

    public init(update: LocationUpdate, source: RecordSource) {
        self.update = update
        self.source = source.storingKey(asVehicleId: update.vehicle.id)
    }
}

import FleetEngine
import FleetModel
import InputFormats
import Kafka

/// Everything the relay needs to run, resolved from flags and environment.
public struct RelayConfiguration: Sendable {
    public var kafka: KafkaConfiguration
    public var topic: String
    public var group: String
    public var deadLetterTopic: String
    public var defaultKind: VehicleKind
    /// How records become events: nil for the native event, else a mapping (a file or a
    /// built-in format).
    public var inputMapping: InputMapping?
    /// Where the schemas of framed values come from; nil: values are JSON.
    public var schemaSource: (any SchemaSource)?
    /// Requests in flight at once (one per vehicle at most).
    public var maximumInFlight: Int
    /// Consumed-but-unfinished records above which fetching pauses.
    public var maximumPendingRecords: Int
    public var pastLocationsLimit: Int
    public var commitInterval: Duration
    public var shutdownTimeout: Duration
    public var retryPolicy: RetryPolicy
    /// How long a request may keep failing transiently before its records are
    /// dead-lettered; nil retries for as long as the process runs.
    public var retryDeadline: Duration?
    /// How long a revoke waits for the revoked partitions' in-flight work before committing.
    /// Longer than a Fleet Engine request may take, so that no request of this member lands
    /// after the next owner's newer fix.
    public var revokeDrainTimeout: Duration
    /// Fixes of a vehicle arriving sooner than this after its last request ended wait and are coalesced.
    public var minimumIntervalPerVehicle: Duration
    /// How long Fleet Engine or the signer may fail before the relay reports not ready.
    public var readyMaximumOutage: Duration
    /// A vehicle with nothing to send for this long is forgotten: memory follows active vehicles.
    public var vehicleIdleTimeout: Duration
    /// Attempts started per second at most (a known quota's share); nil: only the adaptive limit.
    public var maximumRequestsPerSecond: Double?

    public init(kafka: KafkaConfiguration, topic: String, group: String, deadLetterTopic: String? = nil,
                defaultKind: VehicleKind = .vehicle, inputMapping: InputMapping? = nil, maximumInFlight: Int = 64, maximumPendingRecords: Int = PipelineLimits.defaultMaximumPendingRecords,
                pastLocationsLimit: Int = Coalescer.defaultPastLimit, commitInterval: Duration = .seconds(1),
                shutdownTimeout: Duration = .seconds(20), retryPolicy: RetryPolicy = RetryPolicy(),
                retryDeadline: Duration? = nil, revokeDrainTimeout: Duration = .seconds(20),
                minimumIntervalPerVehicle: Duration = .zero, readyMaximumOutage: Duration = .seconds(60),
                vehicleIdleTimeout: Duration = PipelineLimits.defaultVehicleIdleLimit,
                maximumRequestsPerSecond: Double? = nil) {
        self.kafka = kafka
        self.topic = topic
        self.group = group
        self.deadLetterTopic = deadLetterTopic ?? topic + ".dlq"
        self.defaultKind = defaultKind
        self.inputMapping = inputMapping
        self.maximumInFlight = maximumInFlight
        self.maximumPendingRecords = maximumPendingRecords
        self.pastLocationsLimit = pastLocationsLimit
        self.commitInterval = commitInterval
        self.shutdownTimeout = shutdownTimeout
        self.retryPolicy = retryPolicy
        self.retryDeadline = retryDeadline
        self.revokeDrainTimeout = revokeDrainTimeout
        self.minimumIntervalPerVehicle = minimumIntervalPerVehicle
        self.readyMaximumOutage = readyMaximumOutage
        self.vehicleIdleTimeout = vehicleIdleTimeout
        self.maximumRequestsPerSecond = maximumRequestsPerSecond
    }
}

extension RelayConfiguration {
    public func makeDecoder() -> any RecordDecoder {
        RecordDecoders.forTopic(mapping: inputMapping, schemaSource: schemaSource, defaultKind: defaultKind)
    }
}

extension InputRecord {
    public init(_ record: consuming KafkaRecord) {
        self.init(key: record.key, value: record.value,
                  headers: record.headers.map { Header(name: $0.name, value: $0.value) },
                  timestampMilliseconds: record.timestampMilliseconds)
    }
}

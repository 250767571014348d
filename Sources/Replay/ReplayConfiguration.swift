import FleetAuth
import FleetEngine
import FleetModel
import InputFormats
import Kafka
import Relay

/// What to replay and how.
public struct ReplayConfiguration: Sendable {
    public var topic: String
    /// nil: every partition of the topic.
    public var partitions: [Int32]?
    public var fromMilliseconds: Int64
    /// Exclusive end; nil: the high watermarks at start (`--to-end`).
    public var toMilliseconds: Int64?
    /// Update requests per second; nil: unlimited.
    public var rate: Double?
    public var maximumInFlight: Int
    public var dryRun: Bool
    public var checkpointPath: String?
    /// Send without comparing with Fleet Engine's live location.
    public var force: Bool
    /// nil: bad records are only counted.
    public var deadLetterTopic: String?
    public var defaultKind: VehicleKind
    /// nil: the native event.
    public var inputMapping: InputMapping?
    public var schemaSource: (any SchemaSource)?
    public var pastLimit: Int
    /// Records read and not yet finished, at most: what bounds the replay's memory. A vehicle
    /// waits for a full request (`pastLimit` + 1 fixes) until this bound is reached.
    public var maximumPendingRecords: Int
    public var retryPolicy: RetryPolicy
    /// How long one vehicle's update may keep failing transiently before it counts as failed.
    public var retryDeadline: Duration
    /// How long an interrupted replay waits for the requests under way before it saves the
    /// checkpoint without them.
    public var shutdownTimeout: Duration = .seconds(20)
    /// Discard a checkpoint that exists and start over.
    public var restart = false
    /// The flags as given (`-2h` stays relative); by default the absolute times and partitions above.
    public var requestedAs: ReplayRequest?

    /// About 230 MB of records waiting (about 600 bytes each with their vehicles' lanes and
    /// queues), inside a 512 MiB Job with room to spare: up to 4,000 vehicles fill whole
    /// requests of 101 fixes; more share the bound (10,000 vehicles: about 40 fixes per request).
    public static let defaultMaximumPendingRecords = 400_000

    /// What a checkpoint must have been made for to be resumed by this replay.
    public var request: ReplayRequest {
        if let requestedAs { return requestedAs }
        let end: String? = toMilliseconds.map { RFC3339.format(milliseconds: $0) }
        return ReplayRequest(from: RFC3339.format(milliseconds: fromMilliseconds), to: end, partitions: partitions)
    }

    public init(topic: String, partitions: [Int32]? = nil, fromMilliseconds: Int64, toMilliseconds: Int64?,
                rate: Double? = nil, maximumInFlight: Int = 16, dryRun: Bool = false, checkpointPath: String? = nil,
                force: Bool = false, deadLetterTopic: String? = nil, defaultKind: VehicleKind = .vehicle,
                inputMapping: InputMapping? = nil,
                pastLimit: Int = 100, maximumPendingRecords: Int = ReplayConfiguration.defaultMaximumPendingRecords,
                retryPolicy: RetryPolicy = RetryPolicy(), retryDeadline: Duration = .seconds(120)) {
        self.topic = topic
        self.partitions = partitions
        self.fromMilliseconds = fromMilliseconds
        self.toMilliseconds = toMilliseconds
        self.rate = rate
        self.maximumInFlight = maximumInFlight
        self.dryRun = dryRun
        self.checkpointPath = checkpointPath
        self.force = force
        self.deadLetterTopic = deadLetterTopic
        self.defaultKind = defaultKind
        self.inputMapping = inputMapping
        self.pastLimit = pastLimit
        self.maximumPendingRecords = maximumPendingRecords
        self.retryPolicy = retryPolicy
        self.retryDeadline = retryDeadline
    }
}

/// Fleet Engine access for a replay that sends (none for a dry run).
public struct ReplaySender: Sendable {
    public let client: FleetEngineClient
    public let tokens: TokenCache

    public init(client: FleetEngineClient, tokens: TokenCache) {
        self.client = client
        self.tokens = tokens
    }
}

public struct ReplayError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

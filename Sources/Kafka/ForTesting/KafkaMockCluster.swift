import Logging

/// librdkafka's in-process mock cluster: real Kafka wire protocol on loopback,
/// with consumer groups, committed offsets and error injection. For tests and
/// the demo. It keeps only a few MiB per partition; size backlogs accordingly.
///
/// Threading: every method may be called from any thread.
public final class KafkaMockCluster: Sendable {
    /// The cluster lives inside a client handle; this one never connects anywhere.
    private let host: RDKafkaClient
    private let cluster: RDKafkaClient.MockCluster
    public let bootstrapServers: String

    public init(brokers: Int = 3, logger: Logger = Logger(label: "kafka-mock")) throws(KafkaError) {
        self.host = try RDKafkaClient(.producer, configuration: KafkaConfiguration(["log_level": "3"]),
                                      context: RDKafkaClientContext(logger: logger))
        self.cluster = try host.makeMockCluster(brokers: brokers)
        self.bootstrapServers = cluster.bootstrapServers
    }

    deinit {
        cluster.destroy()
    }

    public func createTopic(_ name: String, partitions: Int, replicationFactor: Int = 1) throws(KafkaError) {
        try cluster.createTopic(name, partitions: partitions, replicationFactor: replicationFactor)
    }

    /// Takes a broker offline (its connections are closed and refused) until `setBrokerUp`.
    public func setBrokerDown(_ brokerId: Int32) {
        cluster.setBrokerDown(brokerId)
    }

    public func setBrokerUp(_ brokerId: Int32) {
        cluster.setBrokerUp(brokerId)
    }

    /// Delays every answer of a broker by `roundTrip` (a slow or distant broker), until set back to zero.
    public func setBrokerRoundTripTime(_ brokerId: Int32, _ roundTrip: Duration) {
        cluster.setBrokerRoundTripTime(brokerId, roundTrip)
    }

    /// Makes metadata answer `error` for the topic (3 UNKNOWN_TOPIC_OR_PART: as if it did not
    /// exist; 29 TOPIC_AUTHORIZATION_FAILED), until set back to 0.
    public func setTopicError(_ topic: String, error: Int32) {
        cluster.setTopicError(topic, error: error)
    }

    /// Makes `brokerId` the leader of a partition (clients learn it from metadata).
    public func setPartitionLeader(_ topic: String, partition: Int32, brokerId: Int32) {
        cluster.setPartitionLeader(topic, partition: partition, brokerId: brokerId)
    }

    /// Makes `brokerId` the coordinator of a consumer group (where its commits go).
    public func setGroupCoordinator(_ group: String, brokerId: Int32) {
        cluster.setGroupCoordinator(group, brokerId: brokerId)
    }

    /// Makes the next `count` requests of the given Kafka API that reach `brokerId` fail with
    /// `error`; `pendingRequestErrors` tells how many are still waiting for a request.
    public func failNextRequests(onBroker brokerId: Int32, apiKey: Int16, error: Int32, count: Int) {
        cluster.failNextRequests(onBroker: brokerId, apiKey: apiKey, error: error, count: count)
    }

    /// Errors pushed with `failNextRequests(onBroker:…)` that no request has met yet.
    public func pendingRequestErrors(onBroker brokerId: Int32, apiKey: Int16) -> Int {
        cluster.pendingRequestErrors(onBroker: brokerId, apiKey: apiKey)
    }

    /// Makes the next `count` requests of the given Kafka API fail with `error`
    /// (a Kafka protocol error code, e.g. 16 NOT_COORDINATOR for OffsetCommit, API key 8).
    public func failNextRequests(apiKey: Int16, error: Int32, count: Int) {
        cluster.failNextRequests(apiKey: apiKey, error: error, count: count)
    }
}

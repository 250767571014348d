import CRdKafkaMock
import Kafka
import Logging

/// librdkafka's in-process mock cluster: real Kafka wire protocol on loopback,
/// with consumer groups, committed offsets and error injection. For tests and
/// the demo. It keeps only a few MiB per partition; size backlogs accordingly.
///
/// A testing target of its own, so that the production binary carries none of it.
///
/// Threading: every method may be called from any thread.
public final class KafkaMockCluster: Sendable {
    /// The cluster lives inside a client handle; this one never connects anywhere.
    private let host: RDKafkaClient
    private let cluster: MockCluster
    public let bootstrapServers: String

    public init(brokers: Int = 3, logger: Logger = Logger(label: "kafka-mock")) throws(KafkaError) {
        self.host = try RDKafkaClient(.producer, configuration: KafkaConfiguration(["log_level": "3"]),
                                      context: .plain(logger: logger))
        guard let pointer = rd_kafka_mock_cluster_new(host.handleForTesting, Int32(brokers)) else {
            throw KafkaError(.mockCluster, "cannot create a mock Kafka cluster")
        }
        self.cluster = MockCluster(pointer: pointer)
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

/// librdkafka's mock API on one cluster.
private struct MockCluster: @unchecked Sendable {  // librdkafka's mock API is thread-safe
    let pointer: OpaquePointer

    var bootstrapServers: String { String(cString: rd_kafka_mock_cluster_bootstraps(pointer)) }

    func destroy() { rd_kafka_mock_cluster_destroy(pointer) }

    func createTopic(_ name: String, partitions: Int, replicationFactor: Int) throws(KafkaError) {
        let result = rd_kafka_mock_topic_create(pointer, name, Int32(partitions), Int32(replicationFactor))
        guard result == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError(.mockCluster, "cannot create topic \(name): \(String(cString: rd_kafka_err2name(result)))")
        }
    }

    func setBrokerDown(_ brokerId: Int32) { rd_kafka_mock_broker_set_down(pointer, brokerId) }

    func setBrokerUp(_ brokerId: Int32) { rd_kafka_mock_broker_set_up(pointer, brokerId) }

    func setBrokerRoundTripTime(_ brokerId: Int32, _ roundTrip: Duration) {
        let milliseconds = roundTrip.components.seconds * 1000 + roundTrip.components.attoseconds / 1_000_000_000_000_000
        rd_kafka_mock_broker_set_rtt(pointer, brokerId, Int32(clamping: milliseconds))
    }

    func setTopicError(_ topic: String, error: Int32) {
        rd_kafka_mock_topic_set_error(pointer, topic, rd_kafka_resp_err_t(error))
    }

    func setPartitionLeader(_ topic: String, partition: Int32, brokerId: Int32) {
        rd_kafka_mock_partition_set_leader(pointer, topic, partition, brokerId)
    }

    func setGroupCoordinator(_ group: String, brokerId: Int32) {
        rd_kafka_mock_coordinator_set(pointer, "group", group, brokerId)
    }

    func failNextRequests(onBroker brokerId: Int32, apiKey: Int16, error: Int32, count: Int) {
        for _ in 0..<count {
            fr_mock_broker_push_request_error(pointer, brokerId, apiKey, rd_kafka_resp_err_t(error))
        }
    }

    func pendingRequestErrors(onBroker brokerId: Int32, apiKey: Int16) -> Int {
        var count = 0
        rd_kafka_mock_broker_error_stack_cnt(pointer, brokerId, apiKey, &count)
        return count
    }

    func failNextRequests(apiKey: Int16, error: Int32, count: Int) {
        let errors = [rd_kafka_resp_err_t](repeating: rd_kafka_resp_err_t(error), count: count)
        errors.withUnsafeBufferPointer {
            rd_kafka_mock_push_request_errors_array(pointer, apiKey, count, $0.baseAddress)
        }
    }
}

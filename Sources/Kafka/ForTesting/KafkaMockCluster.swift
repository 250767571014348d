import CRdKafka
import Logging

/// librdkafka's in-process mock cluster: real Kafka wire protocol on loopback,
/// with consumer groups, committed offsets and error injection. For tests and
/// the demo. It keeps only a few MiB per partition; size backlogs accordingly.
///
/// Threading: every method may be called from any thread.
public final class KafkaMockCluster: Sendable {
    private let host: RDKafkaHandle
    private let cluster: MockClusterPointer
    private let context: RDKafkaClientContext
    public let bootstrapServers: String

    struct MockClusterPointer: @unchecked Sendable { let pointer: OpaquePointer }

    public init(brokers: Int = 3, logger: Logger = Logger(label: "kafka-mock")) throws(KafkaError) {
        // The cluster lives inside a client handle; this one never connects anywhere.
        let conf = try RDKafkaConfig.make(KafkaConfiguration(["log_level": "3"]))
        let context = RDKafkaClientContext(logger: logger)
        context.attach(to: conf)
        let host = try RDKafkaConfig.makeClient(type: RD_KAFKA_PRODUCER, conf: conf)
        guard let cluster = rd_kafka_mock_cluster_new(host, Int32(brokers)) else {
            rd_kafka_destroy(host)
            throw KafkaError(.mockCluster, "cannot create a mock Kafka cluster")
        }
        self.host = RDKafkaHandle(pointer: host)
        self.cluster = MockClusterPointer(pointer: cluster)
        self.context = context
        self.bootstrapServers = String(cString: rd_kafka_mock_cluster_bootstraps(cluster))
    }

    deinit {
        rd_kafka_mock_cluster_destroy(cluster.pointer)
        rd_kafka_destroy(host.pointer)
    }

    public func createTopic(_ name: String, partitions: Int, replicationFactor: Int = 1) throws(KafkaError) {
        let result = rd_kafka_mock_topic_create(cluster.pointer, name, Int32(partitions), Int32(replicationFactor))
        guard result == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError(.mockCluster, "cannot create topic \(name): \(RDKafkaConfig.errorName(result))")
        }
    }

    /// Takes a broker offline (its connections are closed and refused) until `setBrokerUp`.
    public func setBrokerDown(_ brokerId: Int32) {
        rd_kafka_mock_broker_set_down(cluster.pointer, brokerId)
    }

    public func setBrokerUp(_ brokerId: Int32) {
        rd_kafka_mock_broker_set_up(cluster.pointer, brokerId)
    }

    /// Delays every answer of a broker by `roundTrip` (a slow or distant broker), until set back to zero.
    public func setBrokerRoundTripTime(_ brokerId: Int32, _ roundTrip: Duration) {
        rd_kafka_mock_broker_set_rtt(cluster.pointer, brokerId, Int32(roundTrip.components.seconds * 1000
            + roundTrip.components.attoseconds / 1_000_000_000_000_000))
    }

    /// Makes metadata answer `error` for the topic (3 UNKNOWN_TOPIC_OR_PART: as if it did not
    /// exist; 29 TOPIC_AUTHORIZATION_FAILED), until set back to 0.
    public func setTopicError(_ topic: String, error: Int32) {
        rd_kafka_mock_topic_set_error(cluster.pointer, topic, rd_kafka_resp_err_t(error))
    }

    /// Makes the next `count` requests of the given Kafka API fail with `error`
    /// (a Kafka protocol error code, e.g. 16 NOT_COORDINATOR for OffsetCommit, API key 8).
    public func failNextRequests(apiKey: Int16, error: Int32, count: Int) {
        let errors = [rd_kafka_resp_err_t](repeating: rd_kafka_resp_err_t(error), count: count)
        errors.withUnsafeBufferPointer {
            rd_kafka_mock_push_request_errors_array(cluster.pointer, apiKey, count, $0.baseAddress)
        }
    }
}

import CRdKafka

/// An error from librdkafka or from this wrapper, with a message fit for one log line.
public struct KafkaError: Error, Sendable, CustomStringConvertible {
    public enum Kind: Sendable {
        case configuration
        case client
        case produce
        case commit
        case query
        case mockCluster
    }

    public let kind: Kind
    public let message: String
    /// librdkafka's error code, when librdkafka reported the error.
    public let code: Int32?

    public init(_ kind: Kind, _ message: String, code: Int32? = nil) {
        self.kind = kind
        self.message = message
        self.code = code
    }

    public var description: String { message }

    /// Retrying cannot help until an operator acts: the topic is missing, access is not
    /// granted, or the record is larger than the broker takes.
    public var isPermanent: Bool {
        guard let code else { return false }
        return Self.permanentCodes.contains(code)
    }

    /// librdkafka's short name of the error code (`UNKNOWN_TOPIC_OR_PART`), for metrics and readiness.
    public var codeName: String? { code.map { String(cString: rd_kafka_err2name(rd_kafka_resp_err_t($0))) } }

    private static let permanentCodes: Set<Int32> = Set([
        RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE, RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE, RD_KAFKA_RESP_ERR_INVALID_RECORD,
        RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART, RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC, RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION,
        RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION, RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
        RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED, RD_KAFKA_RESP_ERR__INVALID_ARG,
    ].map { $0.rawValue })
}

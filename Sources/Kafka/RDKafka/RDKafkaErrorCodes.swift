import CRdKafka

/// What librdkafka's error codes mean for the caller: their short names, and which
/// ones no retry can mend.
enum RDKafkaErrorCodes {
    /// librdkafka's short name of a code (`UNKNOWN_TOPIC_OR_PART`).
    static func name(_ code: Int32) -> String {
        String(cString: rd_kafka_err2name(rd_kafka_resp_err_t(code)))
    }

    /// The topic is missing, access is not granted, or the record is larger than the broker takes.
    static func isPermanent(_ code: Int32) -> Bool { permanent.contains(code) }

    private static let permanent: Set<Int32> = Set([
        RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE, RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE, RD_KAFKA_RESP_ERR_INVALID_RECORD,
        RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART, RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC, RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION,
        RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION, RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
        RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED, RD_KAFKA_RESP_ERR__INVALID_ARG,
    ].map { $0.rawValue })
}

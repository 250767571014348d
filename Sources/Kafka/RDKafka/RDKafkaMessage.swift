import CRdKafka

/// Copies a consumed `rd_kafka_message_t` into a `KafkaRecord`.
enum RDKafkaMessage {
    /// Takes the message by pointer: librdkafka finds its timestamp and headers in
    /// the internal structure around it, so a copy would not do. Nil for error events,
    /// which go to `onError` by name (the caller takes partition EOF out first). Headers are
    /// read only when `readsHeaders`: asking librdkafka for them costs a parse and a list per
    /// record, even for a record with none.
    static func record(from pointer: UnsafeMutablePointer<rd_kafka_message_t>, readsHeaders: Bool,
                       topicNames: inout RDKafkaTopicNames,
                       generation: (TopicPartition) -> UInt64, onError: (String) -> Void) -> KafkaRecord? {
        let message = pointer.pointee
        guard message.err == RD_KAFKA_RESP_ERR_NO_ERROR else {
            onError(RDKafkaConfig.errorName(message.err))
            return nil
        }
        let topic = topicNames.name(of: message.rkt)
        let key: [UInt8]? = message.key.map {
            Array(UnsafeRawBufferPointer(start: $0, count: message.key_len))
        }
        let value = message.payload.map { Array(UnsafeRawBufferPointer(start: $0, count: message.len)) } ?? []
        var timestampType = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE
        let timestamp = rd_kafka_message_timestamp(pointer, &timestampType)
        let partition = TopicPartition(topic: topic, partition: message.partition)
        return KafkaRecord(
            topic: topic, partition: message.partition, offset: message.offset, key: key, value: value,
            timestampMilliseconds: timestamp >= 0 ? timestamp : nil,
            assignmentGeneration: generation(partition),
            headers: readsHeaders ? headers(of: pointer) : []
        )
    }

    private static func headers(of message: UnsafeMutablePointer<rd_kafka_message_t>) -> [KafkaHeader] {
        var headers: OpaquePointer?
        guard rd_kafka_message_headers(message, &headers) == RD_KAFKA_RESP_ERR_NO_ERROR, let headers else { return [] }
        var result: [KafkaHeader] = []
        var index = 0
        var name: UnsafePointer<CChar>?
        var value: UnsafeRawPointer?
        var size = 0
        while rd_kafka_header_get_all(headers, index, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR {
            let bytes = value.map { Array(UnsafeRawBufferPointer(start: $0, count: size)) } ?? []
            result.append(KafkaHeader(name: name.map { String(cString: $0) } ?? "", value: bytes))
            index += 1
        }
        return result
    }
}

/// The names of the topics one poll's messages came from. Messages arrive in runs of one
/// topic, so the last name found is kept: a message of the same run costs no lookup.
struct RDKafkaTopicNames {
    private var names: [OpaquePointer: String] = [:]
    private var last: (topic: OpaquePointer, name: String)?

    mutating func name(of topic: OpaquePointer?) -> String {
        guard let topic else { return "" }
        if let last, last.topic == topic { return last.name }
        let name: String
        if let known = names[topic] {
            name = known
        } else {
            name = String(cString: rd_kafka_topic_name(topic))
            names[topic] = name
        }
        last = (topic, name)
        return name
    }
}

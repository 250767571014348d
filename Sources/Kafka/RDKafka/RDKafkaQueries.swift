import CRdKafka

/// Blocking metadata and offset queries; callers run them off the Swift concurrency pool.
enum RDKafkaQueries {
    static func milliseconds(_ duration: Duration) -> Int32 {
        Int32(clamping: duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000)
    }

    static func committed(_ handle: OpaquePointer, _ partitions: [TopicPartition], timeout: Duration) throws(KafkaError) -> [TopicPartitionOffset] {
        let list = RDKafkaTopicPartitionList.make(partitions)
        defer { rd_kafka_topic_partition_list_destroy(list) }
        let result = rd_kafka_committed(handle, list, milliseconds(timeout))
        guard result == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError(.query, "cannot read committed offsets: \(RDKafkaConfig.errorName(result))")
        }
        return RDKafkaTopicPartitionList.entries(list)
    }

    static func watermarks(_ handle: OpaquePointer, _ partition: TopicPartition, timeout: Duration) throws(KafkaError) -> (low: Int64, high: Int64) {
        var low: Int64 = -1
        var high: Int64 = -1
        let result = rd_kafka_query_watermark_offsets(handle, partition.topic, partition.partition, &low, &high, milliseconds(timeout))
        guard result == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError(.query, "cannot read watermarks of \(partition): \(RDKafkaConfig.errorName(result))")
        }
        return (low, high)
    }
}

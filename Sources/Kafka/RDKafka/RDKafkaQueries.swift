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

    /// The earliest offset per partition whose timestamp is at or after `timestampMilliseconds`;
    /// -1 (end) where no record is that new.
    static func offsetsForTimes(_ handle: OpaquePointer, _ partitions: [TopicPartition], timestampMilliseconds: Int64,
                                timeout: Duration) throws(KafkaError) -> [TopicPartitionOffset] {
        let list = RDKafkaTopicPartitionList.make(partitions.map { TopicPartitionOffset($0, offset: timestampMilliseconds) })
        defer { rd_kafka_topic_partition_list_destroy(list) }
        let result = rd_kafka_offsets_for_times(handle, list, milliseconds(timeout))
        guard result == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError(.query, "cannot look up offsets for times: \(RDKafkaConfig.errorName(result))")
        }
        if let error = RDKafkaTopicPartitionList.firstError(list) {
            throw KafkaError(.query, "cannot look up offsets for times: \(error)")
        }
        return RDKafkaTopicPartitionList.entries(list)
    }

    /// The topic's partition ids, from the cluster's metadata.
    static func partitionIDs(_ handle: OpaquePointer, topic: String, timeout: Duration) throws(KafkaError) -> [Int32] {
        guard let topicHandle = rd_kafka_topic_new(handle, topic, nil) else {
            throw KafkaError(.query, "cannot open topic \(topic)")
        }
        defer { rd_kafka_topic_destroy(topicHandle) }
        var metadata: UnsafePointer<rd_kafka_metadata>?
        let result = rd_kafka_metadata(handle, 0, topicHandle, &metadata, milliseconds(timeout))
        guard result == RD_KAFKA_RESP_ERR_NO_ERROR, let metadata else {
            throw KafkaError(.query, "cannot read metadata of \(topic): \(RDKafkaConfig.errorName(result))")
        }
        defer { rd_kafka_metadata_destroy(metadata) }
        guard metadata.pointee.topic_cnt == 1 else { throw KafkaError(.query, "no metadata for topic \(topic)") }
        let entry = metadata.pointee.topics[0]
        guard entry.err == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError(.query, "topic \(topic): \(RDKafkaConfig.errorName(entry.err))")
        }
        return (0..<Int(entry.partition_cnt)).map { entry.partitions[$0].id }.sorted()
    }
}

import CRdKafka

/// Conversions between librdkafka's `rd_kafka_topic_partition_list_t` and Swift values.
enum RDKafkaTopicPartitionList {
    /// A new list the caller must destroy with `rd_kafka_topic_partition_list_destroy`.
    static func make(_ entries: [TopicPartitionOffset]) -> UnsafeMutablePointer<rd_kafka_topic_partition_list_t> {
        let list = rd_kafka_topic_partition_list_new(Int32(entries.count))!
        for entry in entries {
            let element = rd_kafka_topic_partition_list_add(list, entry.topicPartition.topic, entry.topicPartition.partition)!
            element.pointee.offset = entry.offset
        }
        return list
    }

    static func make(_ partitions: [TopicPartition]) -> UnsafeMutablePointer<rd_kafka_topic_partition_list_t> {
        make(partitions.map { TopicPartitionOffset($0, offset: Int64(RD_KAFKA_OFFSET_INVALID)) })
    }

    static func entries(_ list: UnsafePointer<rd_kafka_topic_partition_list_t>) -> [TopicPartitionOffset] {
        (0..<Int(list.pointee.cnt)).map { index in
            let element = list.pointee.elems[index]
            let partition = TopicPartition(topic: String(cString: element.topic), partition: element.partition)
            return TopicPartitionOffset(partition, offset: element.offset)
        }
    }

    /// The first per-partition error in the list, if any.
    static func firstError(_ list: UnsafePointer<rd_kafka_topic_partition_list_t>) -> String? {
        for index in 0..<Int(list.pointee.cnt) {
            let element = list.pointee.elems[index]
            if element.err != RD_KAFKA_RESP_ERR_NO_ERROR {
                return "\(String(cString: element.topic))/\(element.partition): \(RDKafkaConfig.errorName(element.err))"
            }
        }
        return nil
    }
}

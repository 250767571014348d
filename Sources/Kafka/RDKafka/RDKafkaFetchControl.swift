import CRdKafka

/// Pausing and resuming the fetching of assigned partitions.
enum RDKafkaFetchControl {
    static func pause(_ handle: OpaquePointer, _ partitions: Set<TopicPartition>) {
        apply(partitions) { rd_kafka_pause_partitions(handle, $0) }
    }

    static func resume(_ handle: OpaquePointer, _ partitions: Set<TopicPartition>) {
        apply(partitions) { rd_kafka_resume_partitions(handle, $0) }
    }

    private static func apply(_ partitions: Set<TopicPartition>,
                              _ call: (UnsafeMutablePointer<rd_kafka_topic_partition_list_t>) -> rd_kafka_resp_err_t) {
        guard !partitions.isEmpty else { return }
        let list = RDKafkaTopicPartitionList.make(partitions.sorted())
        defer { rd_kafka_topic_partition_list_destroy(list) }
        _ = call(list)
    }
}

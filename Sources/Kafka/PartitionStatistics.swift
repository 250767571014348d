import JSON

/// One partition as librdkafka's statistics report it (`statistics.interval.ms`): what its
/// fetcher learnt of the partition's ends and what its commits stored. Nothing here costs a
/// query to the broker: the figures come with the fetches and commits the consumer makes anyway.
public struct PartitionStatistics: Sendable, Equatable {
    /// The partition's end (high watermark), as the last fetch answer told it.
    public var highWatermark: Int64?
    /// The partition's oldest offset still kept.
    public var lowWatermark: Int64?
    /// The group's committed offset, as this consumer knows it.
    public var committedOffset: Int64?
    /// librdkafka's `consumer_lag`: high watermark minus committed offset.
    public var consumerLag: Int64?

    public init(highWatermark: Int64? = nil, lowWatermark: Int64? = nil, committedOffset: Int64? = nil,
                consumerLag: Int64? = nil) {
        self.highWatermark = highWatermark
        self.lowWatermark = lowWatermark
        self.committedOffset = committedOffset
        self.consumerLag = consumerLag
    }

    /// Records between the committed offset and the partition's end; with nothing committed
    /// yet, the whole partition (the group starts from its oldest record). Nil while the end
    /// is unknown.
    public var lag: Int64? {
        if let consumerLag { return consumerLag }
        guard let highWatermark else { return nil }
        return max(0, highWatermark - (committedOffset ?? lowWatermark ?? 0))
    }

    /// The partitions of librdkafka's statistics JSON (`topics.<topic>.partitions.<n>`), without
    /// its internal unassigned partition (-1). Negative figures mean "unknown" there.
    public static func parse(_ json: some Collection<UInt8>) -> [TopicPartition: PartitionStatistics] {
        guard let topics = (try? JSONParser.parse(json))?["topics"]?.objectValue else { return [:] }
        var result: [TopicPartition: PartitionStatistics] = [:]
        for (topic, figures) in topics {
            for (number, partition) in figures["partitions"]?.objectValue ?? [:] {
                guard let number = Int32(number), number >= 0 else { continue }
                func known(_ key: String) -> Int64? {
                    partition[key]?.numberValue.flatMap { $0 >= 0 ? Int64($0) : nil }
                }
                result[TopicPartition(topic: topic, partition: number)] = PartitionStatistics(
                    highWatermark: known("hi_offset"), lowWatermark: known("lo_offset"),
                    committedOffset: known("committed_offset"), consumerLag: known("consumer_lag"))
            }
        }
        return result
    }
}

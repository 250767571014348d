import Kafka

/// What the window lookup needs from Kafka; `KafkaPartitionReader` provides it.
public protocol PartitionTimeIndex: Sendable {
    func watermarks(_ partition: TopicPartition, timeout: Duration) async throws -> (low: Int64, high: Int64)
    func offsetsForTimes(_ partitions: [TopicPartition], timestampMilliseconds: Int64,
                         timeout: Duration) async throws -> [TopicPartition: Int64]
    func timestamp(of partition: TopicPartition, at offset: Int64, timeout: Duration) async throws -> Int64?
}

extension KafkaPartitionReader: PartitionTimeIndex {}

/// One partition's part of the replay: offsets `start..<end`.
public struct PartitionWindow: Sendable, Equatable, Codable {
    public enum Method: String, Sendable, Codable {
        /// The broker's offsets-for-times answer, checked against the records around it.
        case lookup
        /// Binary search over record timestamps: the lookup contradicted the partition's data.
        case search
    }

    public let partition: Int32
    public let start: Int64
    public let end: Int64
    public let method: Method

    public init(partition: Int32, start: Int64, end: Int64, method: Method) {
        self.partition = partition
        self.start = start
        self.end = end
        self.method = method
    }

    public var records: Int64 { max(0, end - start) }
}

/// Turns a time window into offset ranges per partition. It asks the broker
/// (offsets-for-times) and checks the answer against the records around it: a broker
/// that answers "end" while the partition holds newer records (librdkafka's mock
/// cluster does, and so can brokers with unusual timestamp settings) is not trusted,
/// and the offset is found by binary search over single-record fetches instead.
/// The search assumes timestamps that do not decrease along a partition (LogAppendTime,
/// or producers stamping in order); records outside the window are filtered when read.
public struct WindowResolver: Sendable {
    let index: any PartitionTimeIndex
    let timeout: Duration

    public init(index: any PartitionTimeIndex, timeout: Duration = .seconds(10)) {
        self.index = index
        self.timeout = timeout
    }

    /// - Parameters:
    ///   - toMilliseconds: exclusive end time; nil: the high watermark now (`--to-end`).
    public func resolve(topic: String, partitions: [Int32], fromMilliseconds: Int64,
                        toMilliseconds: Int64?) async throws -> [PartitionWindow] {
        var windows: [PartitionWindow] = []
        for partition in partitions {
            let topicPartition = TopicPartition(topic: topic, partition: partition)
            let (low, high) = try await index.watermarks(topicPartition, timeout: timeout)
            let (start, startMethod) = try await firstOffset(in: topicPartition, low: low, high: high, atOrAfter: fromMilliseconds)
            var end = high
            var endMethod = PartitionWindow.Method.lookup
            if let toMilliseconds {
                (end, endMethod) = try await firstOffset(in: topicPartition, low: low, high: high, atOrAfter: toMilliseconds)
            }
            let method: PartitionWindow.Method = startMethod == .search || endMethod == .search ? .search : .lookup
            windows.append(PartitionWindow(partition: partition, start: start, end: max(start, end), method: method))
        }
        return windows
    }

    /// The first offset whose record is at least `time` old; `high` when none is.
    func firstOffset(in partition: TopicPartition, low: Int64, high: Int64,
                     atOrAfter time: Int64) async throws -> (Int64, PartitionWindow.Method) {
        guard low < high else { return (high, .lookup) }
        let answer = try await index.offsetsForTimes([partition], timestampMilliseconds: time, timeout: timeout)[partition] ?? -1
        if try await consistent(answer: answer, in: partition, low: low, high: high, time: time) {
            return (answer < 0 ? high : max(answer, low), .lookup)
        }
        return (try await search(partition, low: low, high: high, atOrAfter: time), .search)
    }

    /// Whether the record before the answer is older than `time` and the one at it is not.
    private func consistent(answer: Int64, in partition: TopicPartition, low: Int64, high: Int64, time: Int64) async throws -> Bool {
        let offset = answer < 0 ? high : min(max(answer, low), high)
        if offset > low, let before = try await index.timestamp(of: partition, at: offset - 1, timeout: timeout), before >= time {
            return false
        }
        if offset < high, let at = try await index.timestamp(of: partition, at: offset, timeout: timeout), at < time {
            return false
        }
        return true
    }

    private func search(_ partition: TopicPartition, low: Int64, high: Int64, atOrAfter time: Int64) async throws -> Int64 {
        var lower = low
        var upper = high
        while lower < upper {
            let middle = lower + (upper - lower) / 2
            // A missing record (deleted, or a transaction marker at the end) counts as newer.
            let stamp = try await index.timestamp(of: partition, at: middle, timeout: timeout) ?? .max
            if stamp >= time { upper = middle } else { lower = middle + 1 }
        }
        return lower
    }
}

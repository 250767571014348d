import Kafka
import Logging
import Relay
import Synchronization

/// A replay's record feed: the window's partitions, assigned explicitly and read from the
/// checkpoint's offsets to the window's end, following the pipeline's pause wish. It counts
/// what it read, and at the end which records retention deleted before they were read.
final class WindowFeed: RecordFeed {
    /// The replay's partitions are assigned once; every record read carries generation 0.
    static let generation: UInt64 = 0

    private let reader: KafkaPartitionReader
    private let checkpoint: ReplayCheckpoint
    /// The windows with records left to read.
    private let windows: [PartitionWindow]
    private let progress: ReplayProgress
    private let counters: ReplayCounters
    private let logger: Logger
    private let pauses = PauseMailbox()
    private let tally = Mutex(Tally())

    private struct Tally {
        var recordsRead = 0
        var deletedBeforeRead: [Int32: Int64] = [:]
    }

    /// How long partitions with records left may hand over nothing before the replay fails.
    static let stallLimit = Duration.seconds(60)

    init(checkpoint: ReplayCheckpoint, reader: KafkaPartitionReader, progress: ReplayProgress, counters: ReplayCounters,
         logger: Logger) {
        self.reader = reader
        self.checkpoint = checkpoint
        self.windows = checkpoint.partitions.filter { checkpoint.startOffset(of: $0) < $0.end }
        self.progress = progress
        self.counters = counters
        self.logger = logger
    }

    /// The partitions with records left to read.
    var partitions: [TopicPartition] { windows.map { topicPartition($0.partition) } }

    var recordsRead: Int { tally.withLock { $0.recordsRead } }

    /// Records of the window deleted by retention before they were read, per partition.
    var deletedBeforeRead: [Int32: Int64] { tally.withLock { $0.deletedBeforeRead } }

    func applyPauseWish(_ wish: Set<TopicPartition>, sequence: UInt64) {
        pauses.post(wish, sequence: sequence)
    }

    /// Reads the window's records and hands them on in chunks, until every partition reached
    /// its window's end (or the task is cancelled). Waits while every partition it still reads
    /// is paused; fails when partitions with records left hand over nothing for `stallLimit`.
    func read(into take: @Sendable (consuming [KafkaRecord]) async throws -> Void) async throws {
        var remaining = Dictionary(uniqueKeysWithValues: windows.map { ($0.partition, $0.end) })
        guard !remaining.isEmpty else { return }
        var firstOffsets: [Int32: Int64] = [:]
        try await reader.assign(windows.map { TopicPartitionOffset(topicPartition($0.partition), offset: checkpoint.startOffset(of: $0)) })
        var paused: Set<TopicPartition> = []
        var lastProgress = ContinuousClock.now
        while !remaining.isEmpty, !Task.isCancelled {
            let wish = pauses.wish
            if wish != paused { try await reader.pause(wish.subtracting(paused), resume: paused.subtracting(wish)) }
            paused = wish
            if remaining.keys.allSatisfy({ paused.contains(topicPartition($0)) }) {
                await pauses.waitForChange(from: paused)  // nothing to read until records finish
                lastProgress = .now
                continue
            }
            let (records, reachedEnd) = try await reader.poll(maximum: 2000)
            if !records.isEmpty || !reachedEnd.isEmpty { lastProgress = .now }
            var chunk: [KafkaRecord] = []
            for record in records {
                guard let end = remaining[record.partition] else { continue }
                if firstOffsets[record.partition] == nil { firstOffsets[record.partition] = record.offset }
                guard record.offset < end else {
                    remaining[record.partition] = nil  // the reader started past the window: it was deleted
                    continue
                }
                if record.offset >= end - 1 { remaining[record.partition] = nil }
                chunk.append(record)
            }
            if !chunk.isEmpty {
                tally.withLock { $0.recordsRead += chunk.count }
                progress.advance(by: chunk.count)
                counters.recordsRead.increment(by: chunk.count)
                try await take(consume chunk)
                lastProgress = .now  // the chunk may have waited for the registry: no stalled partition
            }
            for partition in reachedEnd { remaining[partition.partition] = nil }
            if ContinuousClock.now - lastProgress > Self.stallLimit {
                throw ReplayError("no records from partitions \(remaining.keys.sorted()) for \(Self.stallLimit.components.seconds) s; are they still there?")
            }
        }
        guard !Task.isCancelled else { return }
        let deleted = try await deletedBeforeRead(firstOffsets: firstOffsets)
        tally.withLock { $0.deletedBeforeRead = deleted }
    }

    /// Records of the window that retention deleted before they were read, per partition.
    /// The reader starts a partition whose start offset is gone at its earliest record
    /// (`auto.offset.reset=earliest`), so such a partition's first record lies past the
    /// window's start; the partition's log start then says how many are gone. (A first
    /// record past the start with the log starting earlier is a gap, such as a
    /// transaction marker or compaction, and loses nothing.)
    private func deletedBeforeRead(firstOffsets: [Int32: Int64]) async throws -> [Int32: Int64] {
        var deleted: [Int32: Int64] = [:]
        for window in windows {
            let start = checkpoint.startOffset(of: window)
            guard firstOffsets[window.partition] != start else { continue }
            let logStart = try await reader.watermarks(topicPartition(window.partition)).low
            guard logStart > start else { continue }
            let count = min(logStart, window.end) - start
            deleted[window.partition] = count
            logger.error("Partition \(window.partition): offsets \(start)..<\(start + count) of the window (\(count) records) were deleted by retention before they were read; they are not replayed")
        }
        return deleted
    }

    private func topicPartition(_ partition: Int32) -> TopicPartition {
        TopicPartition(topic: checkpoint.topic, partition: partition)
    }
}

/// The pipeline's pause wish, from the state machine (posting never blocks) to
/// the window reader, which waits here while every partition it still reads is paused.
final class PauseMailbox: Sendable {
    private struct State {
        var wish: Set<TopicPartition> = []
        var sequence: UInt64 = 0
        var waiter: CheckedContinuation<Void, Never>?
    }

    private let state = Mutex(State())

    var wish: Set<TopicPartition> { state.withLock { $0.wish } }

    /// Keeps `wish` unless a wish with a higher sequence number was posted already.
    func post(_ wish: Set<TopicPartition>, sequence: UInt64) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard sequence > state.sequence else { return nil }
            state.wish = wish
            state.sequence = sequence
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Returns once the wish differs from `current`, or the task is cancelled.
    func waitForChange(from current: Set<TopicPartition>) async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let changed = state.withLock { state -> Bool in
                    guard state.wish == current, !Task.isCancelled else { return true }
                    state.waiter = continuation
                    return false
                }
                if changed { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { state in
                defer { state.waiter = nil }
                return state.waiter
            }
            waiter?.resume()
        }
    }
}


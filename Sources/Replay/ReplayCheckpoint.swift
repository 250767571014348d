import Foundation
import Kafka
#if canImport(Glibc)
import Glibc
#endif

/// The window as the operator asked for it, in the words of the flags: a relative
/// `--from -2h` stays `-2h`, so a resumed replay can tell whether it was asked the same.
public struct ReplayRequest: Codable, Sendable, Equatable, CustomStringConvertible {
    /// `--from` as given when relative (`-2h`), else the instant in RFC 3339 UTC.
    public var from: String
    /// `--to` likewise; nil for `--to-end`.
    public var to: String?
    /// nil: every partition.
    public var partitions: [Int32]?

    public init(from: String, to: String?, partitions: [Int32]?) {
        self.from = from
        self.to = to
        self.partitions = partitions
    }

    public var description: String {
        let end: String = if let to { "--to " + to } else { "--to-end" }
        let chosen: String = if let partitions {
            "partitions " + partitions.map { String($0) }.joined(separator: ",")
        } else {
            "all partitions"
        }
        return "--from " + from + " " + end + ", " + chosen
    }
}

/// A replay's progress on disk, so an interrupted replay resumes where it stopped.
///
/// It holds the window as asked for and as resolved to times and offsets per partition
/// (so a relative `--from` means the same records on resume), and per partition the offset
/// below which every record of the window finished (sent and accepted, older than Fleet
/// Engine's live location, dead-lettered, or left out), as a consumer group's committed
/// offset would. A resumed replay reads each partition from there and filters on the same
/// times; records above it that finished before are read again and skipped by the live
/// location read before every request, so Fleet Engine receives nothing twice.
public struct ReplayCheckpoint: Codable, Sendable, Equatable {
    public static let currentVersion = 2

    /// Every record of the partition's window below `offset` finished.
    public struct Finished: Codable, Sendable, Equatable {
        public var partition: Int32
        public var offset: Int64

        public init(partition: Int32, offset: Int64) {
            self.partition = partition
            self.offset = offset
        }
    }

    public var version = ReplayCheckpoint.currentVersion
    public var topic: String
    /// The flags that made the window; absent in checkpoints of older versions.
    public var request: ReplayRequest?
    public var fromMilliseconds: Int64
    public var toMilliseconds: Int64?
    public var partitions: [PartitionWindow]
    /// Per partition, the offset below which every record of the window finished.
    public var finished: [Finished]
    public var complete: Bool

    public init(topic: String, request: ReplayRequest? = nil, fromMilliseconds: Int64, toMilliseconds: Int64?,
                partitions: [PartitionWindow], finished: [Finished] = [], complete: Bool = false) {
        self.topic = topic
        self.request = request
        self.fromMilliseconds = fromMilliseconds
        self.toMilliseconds = toMilliseconds
        self.partitions = partitions
        self.finished = finished
        self.complete = complete
    }

    /// Where reading the partition's window starts (again).
    public func startOffset(of window: PartitionWindow) -> Int64 {
        let finishedBelow = finished.first { $0.partition == window.partition }?.offset ?? window.start
        return min(max(window.start, finishedBelow), window.end)
    }

    /// Records that everything below these offsets finished; an offset never moves back.
    public mutating func recordFinished(_ offsets: [TopicPartitionOffset], of topic: String) {
        for entry in offsets where entry.topicPartition.topic == topic {
            let partition = entry.topicPartition.partition
            if let index = finished.firstIndex(where: { $0.partition == partition }) {
                finished[index].offset = max(finished[index].offset, entry.offset)
            } else {
                finished.append(Finished(partition: partition, offset: entry.offset))
            }
        }
        finished.sort { $0.partition < $1.partition }
    }

    public struct Problem: Error, CustomStringConvertible {
        public let description: String
    }

    /// A resume asked for a different window than the checkpoint holds.
    public struct Mismatch: Error, CustomStringConvertible {
        public let description: String
    }

    /// The checkpoint at `path`, or nil when there is none yet.
    public static func load(from path: String) throws -> ReplayCheckpoint? {
        guard FileManager.default.fileExists(atPath: path) else { return nil }
        struct Versioned: Decodable { let version: Int }
        do {
            let data = try Data(contentsOf: URL(fileURLWithPath: path))
            let version = try JSONDecoder().decode(Versioned.self, from: data).version
            guard version == currentVersion else {
                throw Problem(description: "checkpoint \(path) has version \(version), expected \(currentVersion): "
                    + "finish it with the fleet-relay that wrote it, or give --restart to discard it and start over")
            }
            return try JSONDecoder().decode(ReplayCheckpoint.self, from: data)
        } catch let problem as Problem {
            throw problem
        } catch {
            throw Problem(description: "checkpoint \(path) is unreadable: \(error)")
        }
    }

    /// Throws `Mismatch` unless this checkpoint was made for `topic` and `request`.
    public func check(topic: String, request: ReplayRequest, path: String) throws {
        guard self.topic == topic else {
            throw Mismatch(description: "checkpoint \(path) belongs to a replay of topic \(self.topic), not \(topic); "
                + "give its topic to resume it, or --restart to discard it")
        }
        if let saved = self.request, saved != request {
            throw Mismatch(description: "checkpoint \(path) holds a replay of \(saved); this run asks for \(request); "
                + "give the same window to resume it, or --restart to discard it and start over")
        }
    }

    /// Replaces the file at `path` whole and durably: the new content goes to a temporary file
    /// in the same directory, is flushed to disk, renamed over the old one, and the directory is
    /// flushed too, so a crash or power loss leaves either the previous or the new checkpoint.
    public func save(to path: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try DurableFile.replace(path, with: Array(try encoder.encode(self)))
    }
}

/// Whole-file replacement that survives crashes and power loss.
enum DurableFile {
    static func replace(_ path: String, with bytes: [UInt8]) throws {
        let url = URL(fileURLWithPath: path)
        let directory = url.deletingLastPathComponent().path
        // Unique per write, not per process: every container's process is PID 1.
        let temporary = directory + "/.\(url.lastPathComponent).\(UUID().uuidString).tmp"
        do {
            try write(bytes, to: temporary)
            try check(rename(temporary, path) == 0, "cannot replace \(path)")
        } catch {
            unlink(temporary)
            throw error
        }
        try syncDirectory(directory)
    }

    private static func write(_ bytes: [UInt8], to path: String) throws {
        let descriptor: Int32 = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        try check(descriptor >= 0, "cannot create \(path)")
        defer { close(descriptor) }
        var written = 0
        while written < bytes.count {
            let count: Int = bytes.withUnsafeBytes { (buffer: UnsafeRawBufferPointer) -> Int in
                Glibc.write(descriptor, buffer.baseAddress! + written, buffer.count - written)
            }
            if count < 0, errno == EINTR { continue }
            try check(count >= 0, "cannot write \(path)")
            written += count
        }
        try check(fsync(descriptor) == 0, "cannot flush \(path) to disk")
    }

    private static func syncDirectory(_ directory: String) throws {
        let descriptor: Int32 = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        try check(descriptor >= 0, "cannot open directory \(directory)")
        defer { close(descriptor) }
        try check(fsync(descriptor) == 0, "cannot flush directory \(directory) to disk")
    }

    private static func check(_ succeeded: Bool, _ what: @autoclosure () -> String) throws {
        guard succeeded else {
            throw ReplayCheckpoint.Problem(description: "\(what()): \(String(cString: strerror(errno)))")
        }
    }
}

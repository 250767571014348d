import Foundation

/// A replay's progress on disk, so an interrupted replay resumes where it stopped.
///
/// It holds the window as resolved to offsets per partition (so a relative `--from`
/// means the same records on resume) and the vehicles already settled (accepted,
/// or skipped because Fleet Engine's live location was newer). A resumed replay reads
/// the same offsets again and sends only the vehicles not yet settled. Every save
/// writes a temporary file and renames it over the old one, so a crash leaves either
/// the previous or the new checkpoint, never a torn one.
public struct ReplayCheckpoint: Codable, Sendable, Equatable {
    public static let currentVersion = 1

    public var version = ReplayCheckpoint.currentVersion
    public var topic: String
    public var fromMilliseconds: Int64
    public var toMilliseconds: Int64?
    public var partitions: [PartitionWindow]
    /// `kind/id` of every vehicle settled so far.
    public var settledVehicles: [String]
    public var complete: Bool

    public init(topic: String, fromMilliseconds: Int64, toMilliseconds: Int64?, partitions: [PartitionWindow],
                settledVehicles: [String] = [], complete: Bool = false) {
        self.topic = topic
        self.fromMilliseconds = fromMilliseconds
        self.toMilliseconds = toMilliseconds
        self.partitions = partitions
        self.settledVehicles = settledVehicles
        self.complete = complete
    }

    public struct Problem: Error, CustomStringConvertible {
        public let description: String
    }

    /// The checkpoint at `path`, or nil when there is none yet.
    public static func load(from path: String) throws -> ReplayCheckpoint? {
        guard FileManager.default.fileExists(atPath: path) else { return nil }
        let checkpoint: ReplayCheckpoint
        do {
            checkpoint = try JSONDecoder().decode(ReplayCheckpoint.self, from: Data(contentsOf: URL(fileURLWithPath: path)))
        } catch {
            throw Problem(description: "checkpoint \(path) is unreadable: \(error)")
        }
        guard checkpoint.version == currentVersion else {
            throw Problem(description: "checkpoint \(path) has version \(checkpoint.version), expected \(currentVersion)")
        }
        return checkpoint
    }

    public func save(to path: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        let url = URL(fileURLWithPath: path)
        let temporary = url.deletingLastPathComponent()
            .appendingPathComponent(".\(url.lastPathComponent).\(ProcessInfo.processInfo.processIdentifier).tmp")
        try encoder.encode(self).write(to: temporary)
        guard rename(temporary.path, url.path) == 0 else {
            let reason = String(cString: strerror(errno))
            try? FileManager.default.removeItem(at: temporary)
            throw Problem(description: "cannot replace checkpoint \(path): \(reason)")
        }
    }
}

import Foundation

/// Records where the relay spends its CPU while a scenario measures it, with Linux `perf`
/// (Debian's `linux-perf`; `cpu-clock`, which needs no hardware counters), and summarizes
/// each recording as its top symbols and top threads.
struct Profiler: Sendable {
    /// Where recordings (`<name>.perf.data`) and summaries (`<name>.txt`) go.
    let directory: String
    let perf: String
    /// Lines of each summary table printed.
    var topLines = 15

    /// Fails with the way to install `perf` when it is missing.
    static func start(directory: String) throws -> Profiler {
        guard let perf = ["/usr/bin/perf", "/usr/local/bin/perf"].first(where: FileManager.default.isExecutableFile) else {
            throw BenchError("--profile needs Linux perf: apt-get install linux-perf (or run `make profile`, which installs it)")
        }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        return Profiler(directory: directory, perf: perf)
    }

    /// A recording of all CPUs, with call graphs, under way until `finish`; `pid` is the relay's.
    struct Recording {
        let name: String
        let pid: Int32
        let data: String
        let process: ChildProcess
        let threadsAtStart: Set<Int>
    }

    /// Every CPU is sampled about 1,000 times a second; the summary keeps the relay's threads.
    /// (Attached to the relay's process alone, perf spins on the events of threads that ended,
    /// such as the global executor's idle ones, and never stops; and `perf report --pid` leaves
    /// out threads that began before the recording.)
    func record(pid: Int32, name: String) throws -> Recording {
        let data = "\(directory)/\(name).perf.data"
        // Through python3 to unblock every signal first: a child inherits the mask of the
        // spawning thread, and Swift's threads block them all, so perf would never see the
        // SIGINT that ends the recording.
        let unblocked = "import os, signal, sys; signal.pthread_sigmask(signal.SIG_SETMASK, set()); os.execv(sys.argv[1], sys.argv[1:])"
        let process = try ChildProcess(name: "perf", executable: "/usr/bin/python3", arguments: [
            "-c", unblocked, perf, "record", "-a", "-e", "cpu-clock", "-F", "997", "-g", "-o", data,
        ], logPath: "\(directory)/\(name).record.log")
        return Recording(name: name, pid: pid, data: data, process: process, threadsAtStart: Self.threads(of: pid))
    }

    /// Ends the recording (SIGINT, as perf expects), then writes and returns its summary: the
    /// relay's threads by name and its symbols by their own samples, as shares of its samples.
    func finish(_ recording: Recording) async throws -> String {
        let threads = recording.threadsAtStart.union(Self.threads(of: recording.pid))
        recording.process.process.interrupt()
        // perf ends a recording by raising the signal that stopped it again.
        guard [0, SIGINT].contains(await recording.process.waitForExit()) else {
            throw BenchError("perf record failed; see \(directory)/\(recording.name).record.log")
        }
        let rows = try await samples(of: recording).filter { threads.contains($0.thread) }
        let total = max(1, rows.reduce(0) { $0 + $1.samples })
        func top(_ key: (Row) -> String) -> String {
            Dictionary(grouping: rows, by: key).mapValues { $0.reduce(0) { $0 + $1.samples } }
                .sorted { $0.value > $1.value }.prefix(topLines)
                .map { String(format: "  %5.1f %%  %@", Double($0.value) * 100 / Double(total), $0.key) }.joined(separator: "\n")
        }
        let summary = "the relay's \(total) samples by thread:\n\(top(\.threadName))\nby symbol (self):\n\(top(\.symbol))"
        try Data(summary.utf8).write(to: URL(fileURLWithPath: "\(directory)/\(recording.name).txt"))
        return summary
    }

    /// The thread IDs of a process now.
    private static func threads(of pid: Int32) -> Set<Int> {
        Set(((try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []).compactMap { Int($0) })
    }

    /// Samples per thread and symbol of the whole recording.
    struct Row {
        let samples: Int
        let thread: Int
        let threadName: String
        let symbol: String
    }

    private func samples(of recording: Recording) async throws -> [Row] {
        let output = "\(directory)/\(recording.name).threads-and-symbols.txt"
        let process = try ChildProcess(name: "perf report", executable: perf, arguments: [
            "report", "-i", recording.data, "--stdio", "--no-children", "--show-nr-samples", "--sort", "pid,sym", "-g", "none",
            "--field-separator", ";",
        ], logPath: output)
        guard await process.waitForExit() == 0 else { throw BenchError("perf report failed; see \(output)") }
        // "percent;samples;tid:thread name;[.] symbol"
        let rows = try String(contentsOfFile: output, encoding: .utf8).split(separator: "\n").compactMap { line -> Row? in
            let fields = line.split(separator: ";", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard fields.count >= 4, let samples = Int(fields[1]), let colon = fields[2].firstIndex(of: ":"),
                  let thread = Int(fields[2][..<colon]) else { return nil }
            return Row(samples: samples, thread: thread, threadName: String(fields[2][fields[2].index(after: colon)...]),
                       symbol: String(fields[3...].joined(separator: ";").drop { $0 != " " }.dropFirst()))
        }
        return try await demangled(rows)
    }

    /// Swift's symbols in their readable form, when the toolchain's `swift-demangle` is at hand.
    private func demangled(_ rows: [Row]) async throws -> [Row] {
        guard let demangler = ["/usr/bin/swift-demangle", "/opt/swift/usr/bin/swift-demangle"]
            .first(where: FileManager.default.isExecutableFile) else { return rows }
        let input = "\(directory)/symbols.txt", output = "\(directory)/symbols.demangled.txt"
        try Data(rows.map(\.symbol).joined(separator: "\n").utf8).write(to: URL(fileURLWithPath: input))
        let process = try ChildProcess(name: "swift-demangle", executable: "/bin/sh", arguments: [
            "-c", "\"$0\" --simplified --compact < \"$1\"", demangler, input,
        ], logPath: output)
        let names = await process.waitForExit() == 0
            ? try String(contentsOfFile: output, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false) : []
        guard names.count >= rows.count else { return rows }
        return zip(rows, names).map { Row(samples: $0.samples, thread: $0.thread, threadName: $0.threadName, symbol: String($1)) }
    }
}

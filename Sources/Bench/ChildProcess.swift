import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A process the benchmark starts (the relay, the emulator, kcat), with the
/// CPU time and memory the kernel accounts to it.
final class ChildProcess: @unchecked Sendable {  // Foundation's `Process` is not Sendable; it is only read after launch
    let process = Process()
    let name: String
    let logPath: String?
    private let log: FileHandle?
    /// The exit status once known, or whoever waits for it. From the termination handler: on Linux,
    /// Foundation's `waitUntilExit` spins a core while the child runs, a core the relay measured needs.
    private let exit = Mutex<(status: Int32?, waiters: [CheckedContinuation<Int32, Never>])>((nil, []))

    /// - Parameter logPath: where its stdout and stderr go (nil: discarded).
    init(name: String, executable: String, arguments: [String], logPath: String? = nil) throws {
        self.name = name
        self.logPath = logPath
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let logPath {
            _ = FileManager.default.createFile(atPath: logPath, contents: nil)
            log = FileHandle(forWritingAtPath: logPath)
        } else {
            log = nil
        }
        process.standardOutput = log ?? FileHandle.nullDevice
        process.standardError = log ?? FileHandle.nullDevice
        process.terminationHandler = { [self] ended in
            let status = ended.terminationStatus
            let waiters = exit.withLock { exit in
                exit.status = status
                defer { exit.waiters = [] }
                return exit.waiters
            }
            for waiter in waiters { waiter.resume(returning: status) }
        }
        try process.run()
    }

    var pid: Int32 { process.processIdentifier }

    /// User + system CPU seconds so far (/proc/<pid>/stat fields 14 and 15).
    var cpuSeconds: Double {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let afterName = stat.range(of: ") ")
        else { return 0 }
        let fields = stat[afterName.upperBound...].split(separator: " ")
        let ticks = (Double(fields[11]) ?? 0) + (Double(fields[12]) ?? 0)
        return ticks / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// CPU seconds of each live thread of the process so far, by thread id, to the nanosecond
    /// (/proc/<pid>/task/*/schedstat), where `cpuSeconds` counts 10 ms ticks.
    var liveThreadsCPUSeconds: [String: Double] {
        guard let tasks = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task") else { return [:] }
        var seconds: [String: Double] = [:]
        for task in tasks {
            guard let schedstat = try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/schedstat", encoding: .utf8),
                  let nanoseconds = schedstat.split(separator: " ").first.flatMap({ Double($0) }) else { continue }
            seconds[task] = nanoseconds / 1e9
        }
        return seconds
    }

    /// The CPU seconds the process's threads spent since `earlier` (a `liveThreadsCPUSeconds`):
    /// a thread started since counts whole. A thread that ended since is left out, with what it
    /// spent in between; a plain difference of sums would subtract its whole life (a resting
    /// relay whose idle executor thread exits read as negative CPU).
    func threadsCPUSeconds(since earlier: [String: Double]) -> Double {
        liveThreadsCPUSeconds.reduce(0) { sum, thread in sum + max(0, thread.value - (earlier[thread.key] ?? 0)) }
    }

    /// Peak resident memory in MB (VmHWM).
    var peakRSSMegabytes: Double { statusKilobytes("VmHWM") / 1024 }

    var rssMegabytes: Double { statusKilobytes("VmRSS") / 1024 }

    private func statusKilobytes(_ field: String) -> Double {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix(field + ":") })
        else { return 0 }
        return Double(line.split(separator: " ").dropFirst().first ?? "") ?? 0
    }

    /// SIGTERM, then waits for the exit status.
    func stop() async -> Int32 {
        if process.isRunning { process.terminate() }
        return await waitForExit()
    }

    /// SIGKILL, then waits for the exit status: for a child that never ends on SIGTERM (kcat,
    /// which inherits the spawning thread's blocked signals and so never sees it).
    func kill() async -> Int32 {
        if process.isRunning { Glibc.kill(pid, SIGKILL) }
        return await waitForExit()
    }

    func waitForExit() async -> Int32 {
        await withCheckedContinuation { continuation in
            let known = exit.withLock { exit -> Int32? in
                if exit.status == nil { exit.waiters.append(continuation) }
                return exit.status
            }
            if let known { continuation.resume(returning: known) }
        }
    }
}

import Foundation
import Testing

/// A failed `make test` ends with `scripts/test-failure-summary.py`'s account of it, where the
/// tail of a CI log shows it: what failed, what a crash interrupted, the crashed thread's frames.
@Suite struct TestFailureSummaryTests {
    static let script = DeployArtifactsTests.root.appendingPathComponent("scripts/test-failure-summary.py").path

    /// The output of a run in which one test failed and the process then crashed inside another,
    /// in the shapes Swift Testing and Swift's backtracer print.
    static let log = """
        ◇ Test run started.
        ◇ Test passes() started.
        ◇ Test fails() started.
        ◇ Test crashesHere() started.
        ◇ Test perCase(x:) started.
        ◇ Test case passing 1 argument x → 1 to perCase(x:) started.
        ◇ Test case passing 1 argument x → 2 to perCase(x:) started.
        ◇ Test interruptedToo(x:) started.
        ◇ Test case passing 1 argument x → 1 to interruptedToo(x:) started.
        ✔ Test passes() passed after 0.1 seconds.
        ✔ Test perCase(x:) with 2 test cases passed after 0.2 seconds.
        ✘ Test fails() recorded an issue at Some.swift:3:5: Expectation failed: 1 == 2
        ✘ Test fails() failed after 0.3 seconds with 1 issue.
        Sources/Relay/Pipeline/Some.swift:110: Fatal error: an answer comes only for a request the slot started

        *** Program crashed: Illegal instruction at 0x00007f954c36df7f ***

        Thread 7 "NIO-ELT-0-#1" crashed:

          0      0x00007f954c36df7f closure #1 in closure #1 in _assertionFailure(_:_:file:line:flags:) + 623 in libswiftCore.so
          1 [ra] 0x0000562e8d3f0000 RequestSlot.ended(_:) + 20 in fleet-relayPackageTests.xctest at Some.swift:110:5
        ...

        Registers:

        rip 0x00007f954c36df7f  0f 0b
        """

    @Test func aFailedRunEndsWithWhatFailedWhatACrashInterruptedAndTheCrashedFrames() async throws {
        let python = try #require(which("python3"))
        let logFile = FileManager.default.temporaryDirectory.appendingPathComponent("test-output-\(UUID().uuidString).log").path
        defer { try? FileManager.default.removeItem(atPath: logFile) }
        try Self.log.write(toFile: logFile, atomically: true, encoding: .utf8)

        let summary = try await runTool(python, [Self.script, logFile], input: "")
        #expect(summary.status == 0, "\(summary.output)")
        let sections = summary.output.components(separatedBy: "-- ")
        let failed = try #require(sections.first { $0.hasPrefix("failed:") })
        #expect(failed.contains("fails() recorded an issue at Some.swift:3:5"))
        #expect(!failed.contains("passes()"))
        let interrupted = try #require(sections.first { $0.hasPrefix("under way") })
        #expect(interrupted.split(separator: "\n").dropFirst().map { $0.trimmingCharacters(in: .whitespaces) }
            == ["crashesHere()", "interruptedToo(x:)"], "\(interrupted)")
        let crash = try #require(sections.first { $0.hasPrefix("crash:") })
        #expect(crash.contains("Fatal error: an answer comes only for a request the slot started"))
        #expect(crash.contains("RequestSlot.ended(_:)"))
        #expect(!crash.contains("rip"), "registers stay out of the summary")
    }
}

import Foundation
import Testing

/// The README says what the code says.
@Suite struct ReadmeTests {
    /// The table of targets is generated from Package.swift's comments (`make readme-structure`):
    /// a target added, renamed or described anew without regenerating it fails here.
    @Test func theTableOfTargetsIsTheOnePackageSwiftDescribes() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let check = Process()
        check.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        check.arguments = ["python3", root.appendingPathComponent("scripts/readme-structure.py").path, "--check"]
        let errors = Pipe()
        check.standardError = errors
        try check.run()
        check.waitUntilExit()
        let message = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(check.terminationStatus == 0, "\(message)")
    }
}

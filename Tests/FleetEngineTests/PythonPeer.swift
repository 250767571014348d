import Foundation

/// A Python script of `Python/`, run with the test virtualenv's interpreter (`make test`
/// creates it with Google's Fleet Engine clients and grpcio).
struct PythonPeer {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    static var python: String {
        get throws {
            let path = ProcessInfo.processInfo.environment["FLEET_RELAY_TEST_PYTHON"]
                ?? URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
                    .appendingPathComponent(".build/test-venv/bin/python3").path
            guard FileManager.default.isExecutableFile(atPath: path) else {
                throw Failure(description: "no Python with Google's Fleet Engine clients at \(path): run `make test`, which installs it")
            }
            return path
        }
    }

    let process = Process()
    private let input = Pipe(), output = Pipe(), errors = Pipe()

    /// Starts `Python/<script>` with `arguments`.
    init(_ script: String, _ arguments: [String]) throws {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Python/" + script).path
        process.executableURL = URL(fileURLWithPath: try Self.python)
        process.arguments = [path] + arguments
        process.standardInput = input
        process.standardOutput = output
        process.standardError = errors
        try process.run()
    }

    /// Writes `text` to the script's stdin.
    func write(_ text: String) {
        input.fileHandleForWriting.write(Data(text.utf8))
    }

    /// The first line the script prints.
    func readLine() -> String {
        var line = Data()
        while true {
            let byte = output.fileHandleForReading.readData(ofLength: 1)
            if byte.isEmpty || byte == Data("\n".utf8) { return String(decoding: line, as: UTF8.self) }
            line.append(byte)
        }
    }

    /// Closes stdin, waits for the script to end, and returns the lines it printed since.
    func finish() throws -> [String] {
        try input.fileHandleForWriting.close()
        let printed = output.fileHandleForReading.readDataToEndOfFile()
        let complaints = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw Failure(description: "the Python peer failed: \(String(decoding: complaints, as: UTF8.self).suffix(2000))")
        }
        return String(decoding: printed, as: UTF8.self).split(separator: "\n").map(String.init)
    }
}

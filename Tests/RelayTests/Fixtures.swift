import Foundation
import JSON

/// Sample records of docs/events.md.
struct SampleRecord {
    let key: [UInt8]?
    let value: [UInt8]
    let reason: String?
}

enum Fixtures {
    static func records(_ name: String) throws -> [SampleRecord] {
        let url = try require(Bundle.module.url(forResource: name, withExtension: "jsonl", subdirectory: "Fixtures"))
        let text = try String(contentsOf: url, encoding: .utf8)
        return try text.split(separator: "\n").filter { !$0.isEmpty }.map { line in
            let object = try JSONParser.parse(String(line))
            return SampleRecord(key: object["key"]?.stringValue.map { Array($0.utf8) },
                                value: Array(try require(object["value"]?.stringValue).utf8),
                                reason: object["reason"]?.stringValue)
        }
    }

    static var good: [SampleRecord] { get throws { try records("good-events") } }
    static var bad: [SampleRecord] { get throws { try records("bad-events") } }
}

/// `#require` outside a test function: throws instead of recording.
func require<T>(_ value: T?, _ message: String = "missing value") throws -> T {
    guard let value else { throw FixtureError(message: message) }
    return value
}

struct FixtureError: Error { let message: String }

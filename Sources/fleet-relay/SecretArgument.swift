import CommandLineSupport
import Foundation

/// A secret given as a flag (or its environment variable) or as a file, e.g. a mounted
/// Kubernetes Secret. Errors name the flag or the file, never the text.
enum SecretArgument {
    /// The flag's text, else the file's trimmed text, else nil.
    static func read(_ value: String?, orFile path: String?, fileFlag: String) throws(StartupError) -> String? {
        if let value { return value }
        guard let path else { return nil }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw StartupError("\(fileFlag) \(path): cannot be read")
        }
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

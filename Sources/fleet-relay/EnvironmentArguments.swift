import ArgumentParser

/// Every flag of a subcommand may also come from `FLEET_RELAY_<FLAG_IN_UPPER_SNAKE>`
/// (e.g. `--max-in-flight` from `FLEET_RELAY_MAX_IN_FLIGHT`); a flag on the command
/// line wins. Repeatable options take one value per line of the variable.
enum EnvironmentArguments {
    static let prefix = "FLEET_RELAY_"

    struct Resolution {
        var arguments: [String]
        var warnings: [String]
    }

    /// The command line with environment-supplied flags appended.
    static func resolve(arguments: [String], environment: [String: String],
                        subcommands: [String: any ParsableCommand.Type], root: any ParsableCommand.Type) -> Resolution {
        guard let name = arguments.first(where: { !$0.hasPrefix("-") }), let command = subcommands[name] else {
            return Resolution(arguments: arguments, warnings: [])
        }
        let known = options(in: root.helpMessage(for: command, columns: 10_000))
        let given = Set(arguments.compactMap { argument -> String? in
            guard argument.hasPrefix("--") else { return nil }
            return String(argument.dropFirst(2).split(separator: "=", maxSplits: 1).first ?? "")
        })
        var resolved = arguments
        var warnings: [String] = []
        for (variable, value) in environment.sorted(by: { $0.key < $1.key }) where variable.hasPrefix(prefix) {
            let flag = variable.dropFirst(prefix.count).lowercased().replacingOccurrences(of: "_", with: "-")
            guard let takesValue = known[flag] else {
                warnings.append("ignoring \(variable): '\(name)' has no --\(flag)")
                continue
            }
            guard !given.contains(flag) else { continue }
            if takesValue {
                for line in value.split(separator: "\n") where !line.isEmpty {
                    resolved += ["--\(flag)", String(line)]
                }
            } else if ["1", "true", "yes", "on"].contains(value.lowercased()) {
                resolved.append("--\(flag)")
            }
        }
        return Resolution(arguments: resolved, warnings: warnings)
    }

    /// Long option names in a help text, each with whether it takes a value (`--name <value>`).
    static func options(in help: String) -> [String: Bool] {
        var result: [String: Bool] = [:]
        for line in help.split(separator: "\n") {
            let trimmed = line.drop { $0 == " " }
            guard trimmed.hasPrefix("-") else { continue }
            for token in trimmed.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) {
                guard token.hasPrefix("--") else { continue }
                let words = token.split(separator: " ")
                let name = String(words[0].dropFirst(2))
                guard name != "help", name != "version" else { continue }
                result[name] = words.count > 1 && words[1].hasPrefix("<")
            }
        }
        return result
    }
}

import Foundation

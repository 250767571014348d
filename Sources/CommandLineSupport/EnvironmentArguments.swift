import ArgumentParser
import Foundation

/// Every flag of a subcommand may also come from `<PREFIX><FLAG_IN_UPPER_SNAKE>`
/// (e.g. `--max-in-flight` from `FLEET_RELAY_MAX_IN_FLIGHT`); a flag on the command
/// line wins. Repeatable options take one value per line of the variable.
///
/// The flags come from ArgumentParser's structured model of the command (what
/// `--experimental-dump-help` prints), not from the help text, so wording and
/// wrapping never hide a variable.
package enum EnvironmentArguments {
    package static let prefix = "FLEET_RELAY_"

    package struct Resolution {
        package var arguments: [String]
        package var warnings: [String]
    }

    /// The command line with environment-supplied flags appended.
    package static func resolve(arguments: [String], environment: [String: String],
                                root: any ParsableCommand.Type) -> Resolution {
        let subcommands = subcommandOptions(of: root)
        guard let name = arguments.first(where: { !$0.hasPrefix("-") }), let known = subcommands[name] else {
            return Resolution(arguments: arguments, warnings: [])
        }
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

    /// For each subcommand of `root`, its long option names, each with whether it takes a value.
    package static func subcommandOptions(of root: any ParsableCommand.Type) -> [String: [String: Bool]] {
        guard let info = try? JSONDecoder().decode(ToolInfo.self, from: Data(root._dumpHelp().utf8)) else { return [:] }
        var result: [String: [String: Bool]] = [:]
        for command in info.command.subcommands ?? [] {
            result[command.commandName] = options(of: command)
        }
        return result
    }

    static func options(of command: ToolInfo.Command) -> [String: Bool] {
        var result: [String: Bool] = [:]
        for argument in command.arguments ?? [] where argument.kind != "positional" {
            for name in argument.names ?? [] where name.kind == "long" && !["help", "version"].contains(name.name) {
                result[name.name] = argument.kind == "option"
            }
        }
        return result
    }
}

/// The part of ArgumentParser's serialized tool info (`ToolInfoV0`, which the package does not
/// export as a library) that names options.
struct ToolInfo: Decodable {
    struct Command: Decodable {
        var commandName: String
        var subcommands: [Command]?
        var arguments: [Argument]?
    }

    struct Argument: Decodable {
        /// positional, option or flag.
        var kind: String
        var names: [Name]?
    }

    struct Name: Decodable {
        /// long, short or longWithSingleDash.
        var kind: String
        var name: String
    }

    var command: Command
}

import ArgumentParser
import Foundation

/// What `fleet-relay` and `fleet-relay-dev` do with their command line: flags from the
/// environment, then the command, with exit codes an operator can act on (64 usage,
/// 78 configuration, the command's own otherwise) and errors on one line.
package enum CommandLineMain {
    package static func run(_ root: any ParsableCommand.Type) async -> Never {
        let tool = root.configuration.commandName ?? "fleet-relay"
        MallocTuning.apply(environment: ProcessInfo.processInfo.environment)
        let resolution = EnvironmentArguments.resolve(
            arguments: Array(CommandLine.arguments.dropFirst()), environment: ProcessInfo.processInfo.environment, root: root)
        for warning in resolution.warnings { printError("\(tool): warning: \(warning)") }
        do {
            var command = try root.parseAsRoot(resolution.arguments)
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
            exit(0)
        } catch let code as ExitCode {
            exit(code.rawValue)  // the command has said why
        } catch let error as StartupError {
            printError("\(tool): error: \(error.description)")
            exit(78)  // EX_CONFIG
        } catch {
            let code = root.exitCode(for: error)
            if code == .success {
                print(root.fullMessage(for: error))
                exit(0)
            }
            let message = root.message(for: error).split(separator: "\n").first.map(String.init) ?? "\(error)"
            let hint = resolution.arguments.first { !$0.hasPrefix("-") }.map { " (see '\(tool) \($0) --help')" } ?? " (see '\(tool) --help')"
            printError("\(tool): error: \(message)\(hint)")
            exit(code.rawValue)
        }
    }

    package static func printError(_ line: String) {
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }
}

/// Unbuffered lines on standard output, so status shows up at once through pipes too.
package enum Console {
    package static func line(_ text: String) {
        FileHandle.standardOutput.write(Data((text + "\n").utf8))
    }
}

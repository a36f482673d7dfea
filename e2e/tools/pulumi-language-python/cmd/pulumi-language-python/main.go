// Command pulumi-language-python is a minimal Python language host for the Pulumi engine: a stand-in for the
// release's own host, whose module the module proxy does not serve. It implements the two calls the engine needs
// to run a program and a policy pack:
//   - Run starts pulumi-language-python-exec (copied beside this binary from the sdk/v3 module at build time) with
//     the project's Python, the same flags and the PULUMI_CONFIG / PULUMI_CONFIG_SECRET_KEYS environment the real
//     host passes;
//   - RunPlugin starts `python -u -m pulumi.policy ENGINE PACK_DIR` for a policy pack and streams its output back.
//
// Everything else answers Unimplemented, which the engine treats as "not supported": plugins are not discovered
// (they are installed up front), dependencies are not installed (the project's virtualenv is used as it is).
// The Python interpreter is that of the `virtualenv` runtime option (Pulumi.yaml, PulumiPolicy.yaml; relative to
// the project's root), else $PULUMI_PYTHON_CMD, else python3 on PATH.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/pulumi/pulumi/sdk/v3/go/common/util/rpcutil"
)

// version is set at build time (-X main.version=...).
var version = "0.0.0"

// userActionableExit is the exit code of pulumi-language-python-exec after it reported an error itself.
const userActionableExit = 32

type host struct {
	pulumirpc.UnimplementedLanguageRuntimeServer
	exec   string
	engine string
}

func main() {
	// The engine passes logging and tracing flags before the engine address; none changes what this host does.
	flags := flag.NewFlagSet("pulumi-language-python", flag.ContinueOnError)
	flags.String("tracing", "", "ignored")
	flags.String("root", "", "ignored")
	flags.String("binary", "", "ignored")
	flags.Bool("logflow", false, "ignored")
	flags.Bool("logtostderr", false, "ignored")
	flags.Int("v", 0, "ignored")
	if err := flags.Parse(os.Args[1:]); err != nil {
		fail(err)
	}
	self, err := os.Executable()
	if err != nil {
		fail(err)
	}
	h := &host{exec: filepath.Join(filepath.Dir(self), "pulumi-language-python-exec")}
	if _, err := os.Stat(h.exec); err != nil {
		fail(fmt.Errorf("missing executor: %w", err))
	}
	if flags.NArg() > 0 {
		h.engine = flags.Arg(0)
	}
	port, done, err := rpcutil.Serve(0, nil, []func(*grpc.Server) error{
		func(srv *grpc.Server) error { pulumirpc.RegisterLanguageRuntimeServer(srv, h); return nil },
	}, nil)
	if err != nil {
		fail(err)
	}
	fmt.Printf("%d\n", port)
	if err := <-done; err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "pulumi-language-python: %v\n", err)
	os.Exit(1)
}

func python(info *pulumirpc.ProgramInfo) string {
	if venv := info.GetOptions().GetFields()["virtualenv"].GetStringValue(); venv != "" {
		if !filepath.IsAbs(venv) {
			venv = filepath.Join(info.GetRootDirectory(), venv)
		}
		return filepath.Join(venv, "bin", "python")
	}
	if cmd := os.Getenv("PULUMI_PYTHON_CMD"); cmd != "" {
		return cmd
	}
	return "python3"
}

func (h *host) GetPluginInfo(context.Context, *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: version}, nil
}

// GetRequiredPlugins reports none: the harness installs the provider plugins before the engine runs.
func (h *host) GetRequiredPlugins(context.Context, *pulumirpc.GetRequiredPluginsRequest,
) (*pulumirpc.GetRequiredPluginsResponse, error) {
	return &pulumirpc.GetRequiredPluginsResponse{}, nil
}

// Run runs the program to completion; its output goes to this host's stdout and stderr, as the real host does.
func (h *host) Run(ctx context.Context, req *pulumirpc.RunRequest) (*pulumirpc.RunResponse, error) {
	program, root := req.GetProgram(), ""
	if info := req.GetInfo(); info != nil {
		root = info.GetRootDirectory()
		if info.GetEntryPoint() != "" {
			program = filepath.Join(info.GetProgramDirectory(), info.GetEntryPoint())
		}
	}
	if program == "" {
		program = "."
	}
	args := []string{"-u", h.exec}
	for _, kv := range [][2]string{
		{"monitor", req.GetMonitorAddress()}, {"engine", h.engine}, {"project", req.GetProject()},
		{"stack", req.GetStack()}, {"pwd", req.GetPwd()}, {"dry_run", strconv.FormatBool(req.GetDryRun())},
		{"parallel", strconv.Itoa(int(req.GetParallel()))}, {"organization", req.GetOrganization()},
		{"root_directory", root},
	} {
		if kv[1] != "" {
			args = append(args, "--"+kv[0], kv[1])
		}
	}
	args = append(append(args, program), req.GetArgs()...)
	config, err := json.Marshal(map[string]string{})
	if req.GetConfig() != nil {
		config, err = json.Marshal(req.GetConfig())
	}
	if err != nil {
		return nil, err
	}
	secrets, err := json.Marshal(append([]string{}, req.GetConfigSecretKeys()...))
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, python(req.GetInfo()), args...)
	cmd.Dir = req.GetPwd()
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "PULUMI_CONFIG="+string(config), "PULUMI_CONFIG_SECRET_KEYS="+string(secrets))
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			if exit.ExitCode() == userActionableExit {
				return &pulumirpc.RunResponse{Bail: true}, nil
			}
			return &pulumirpc.RunResponse{Error: fmt.Sprintf("Program exited with non-zero exit code: %d",
				exit.ExitCode())}, nil
		}
		return &pulumirpc.RunResponse{Error: fmt.Sprintf("could not run the program: %v", err)}, nil
	}
	return &pulumirpc.RunResponse{}, nil
}

// RunPlugin runs a Python policy pack (the only plugin kind a Python project runs this way) and streams its
// stdout (where it prints its port), its stderr and its exit code back to the engine.
func (h *host) RunPlugin(req *pulumirpc.RunPluginRequest,
	server grpc.ServerStreamingServer[pulumirpc.RunPluginResponse],
) error {
	dir := req.GetPwd()
	if info := req.GetInfo(); info != nil && info.GetProgramDirectory() != "" {
		dir = info.GetProgramDirectory()
	}
	args := append(append([]string{"-u", "-m", "pulumi.policy"}, req.GetArgs()...), dir)
	cmd := exec.CommandContext(server.Context(), python(req.GetInfo()), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), req.GetEnv()...)
	send := make(chan *pulumirpc.RunPluginResponse)
	stream := func(r io.Reader, wrap func([]byte) *pulumirpc.RunPluginResponse) {
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				send <- wrap(append([]byte{}, buf[:n]...))
			}
			if err != nil {
				send <- nil
				return
			}
		}
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	go stream(stdout, func(b []byte) *pulumirpc.RunPluginResponse {
		return &pulumirpc.RunPluginResponse{Output: &pulumirpc.RunPluginResponse_Stdout{Stdout: b}}
	})
	go stream(stderr, func(b []byte) *pulumirpc.RunPluginResponse {
		return &pulumirpc.RunPluginResponse{Output: &pulumirpc.RunPluginResponse_Stderr{Stderr: b}}
	})
	var sendErr error
	for open := 2; open > 0; {
		msg := <-send
		if msg == nil {
			open--
		} else if sendErr == nil {
			sendErr = server.Send(msg)
		}
	}
	code := 0
	if err := cmd.Wait(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			return err
		}
		code = exit.ExitCode()
	}
	if sendErr != nil {
		return sendErr
	}
	return server.Send(&pulumirpc.RunPluginResponse{Output: &pulumirpc.RunPluginResponse_Exitcode{
		Exitcode: int32(code)}})
}
